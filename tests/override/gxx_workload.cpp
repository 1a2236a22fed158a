// Input for the gxx test of run_real_program.sh: a small program whose compilation makes
// cc1plus instantiate many templates (containers, algorithms, <regex>), which is what
// makes the compiler allocate. Its own output is deterministic as well, so the built
// program is run and compared too.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <numeric>
#include <regex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

// Deterministic generator, so the run prints the same on every machine.
struct Lcg {
  std::uint64_t state;
  std::uint32_t next() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<std::uint32_t>(state >> 33);
  }
};

template <typename Map>
std::vector<std::pair<typename Map::key_type, typename Map::mapped_type>> top(const Map& m,
                                                                              std::size_t n) {
  std::vector<std::pair<typename Map::key_type, typename Map::mapped_type>> v(m.begin(), m.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  v.resize(std::min(n, v.size()));
  return v;
}

template <typename Range>
std::uint64_t checksum(const Range& r) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const auto& s : r)
    for (unsigned char c : s)
      h = (h ^ c) * 1099511628211ULL;
  return h;
}

}  // namespace

int main() {
  Lcg rng{42};
  std::vector<std::string> words;
  for (int i = 0; i < 50000; ++i) {
    std::string w;
    for (std::uint32_t n = 3 + rng.next() % 8; n > 0; --n)
      w += static_cast<char>('a' + rng.next() % 26);
    words.push_back(std::move(w));
  }

  std::map<std::string, int> ordered;
  std::unordered_map<std::string, int> hashed;
  for (int i = 0; i < 200000; ++i) {
    const std::string& w = words[rng.next() % words.size()];
    ++ordered[w];
    ++hashed[w];
  }
  std::cout << "distinct " << ordered.size() << ' ' << hashed.size() << '\n';
  for (const auto& [w, n] : top(ordered, 5))
    std::cout << w << ' ' << n << '\n';

  std::set<std::string> unique(words.begin(), words.end());
  std::vector<std::string> sorted(unique.begin(), unique.end());
  std::sort(sorted.begin(), sorted.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  std::cout << "sorted " << checksum(sorted) << '\n';

  const std::regex pattern("([aeiou])([^aeiou]+)\\1");
  std::size_t matches = 0;
  std::string replaced;
  for (std::size_t i = 0; i < 5000; ++i) {
    matches += std::regex_search(words[i], pattern) ? 1 : 0;
    replaced += std::regex_replace(words[i], pattern, "<$2>");
  }
  std::cout << "regex " << matches << ' ' << replaced.size() << ' '
            << std::accumulate(replaced.begin(), replaced.end(), 0L) << '\n';
}
