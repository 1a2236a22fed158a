// mempool-bench apps: the input of the compile case, a mid-size C++ file that
// g++ compiles at -O2 with much of the standard library (containers, regex,
// variant, ranges, streams). The program it makes prints a summary whose last
// line is "ok" when its own checks passed; the output must be the same under
// every allocator that ran the compiler.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <deque>
#include <functional>
#include <iomanip>
#include <iostream>
#include <list>
#include <map>
#include <numeric>
#include <optional>
#include <ranges>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

namespace {

using Value = std::variant<std::int64_t, double, std::string, std::vector<std::int64_t>>;

struct Describe {
  std::string operator()(std::int64_t v) const { return "int " + std::to_string(v); }
  std::string operator()(double v) const {
    std::ostringstream s;
    s << std::fixed << std::setprecision(3) << v;
    return "double " + s.str();
  }
  std::string operator()(const std::string& v) const { return "string " + v; }
  std::string operator()(const std::vector<std::int64_t>& v) const {
    return "vector of " + std::to_string(v.size());
  }
};

template <class Key, class T>
class LruCache {
 public:
  explicit LruCache(std::size_t capacity) : capacity_(capacity) {}
  std::optional<T> get(const Key& k) {
    auto it = index_.find(k);
    if (it == index_.end()) return std::nullopt;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }
  void put(const Key& k, T v) {
    if (auto it = index_.find(k); it != index_.end()) order_.erase(it->second);
    order_.emplace_front(k, std::move(v));
    index_[k] = order_.begin();
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }
  std::size_t size() const { return order_.size(); }

 private:
  std::size_t capacity_;
  std::list<std::pair<Key, T>> order_;
  std::unordered_map<Key, typename std::list<std::pair<Key, T>>::iterator> index_;
};

std::vector<std::string> tokens(const std::string& text) {
  static const std::regex word("[A-Za-z_][A-Za-z0-9_]*|[0-9]+(\\.[0-9]+)?|[-+*/=<>!]+");
  std::vector<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), word); it != std::sregex_iterator();
       ++it)
    out.push_back(it->str());
  return out;
}

Value parse(const std::string& token) {
  if (std::regex_match(token, std::regex("[0-9]+"))) return std::int64_t{std::stoll(token)};
  if (std::regex_match(token, std::regex("[0-9]+\\.[0-9]+"))) return std::stod(token);
  if (token.size() > 6) {
    std::vector<std::int64_t> codes;
    for (char c : token)
      codes.push_back(c);
    return codes;
  }
  return token;
}

template <class Range>
std::int64_t checksum(const Range& r) {
  std::int64_t h = 1469598103;
  for (const auto& x : r)
    h = (h * 1099511628211) ^ static_cast<std::int64_t>(std::hash<std::string>{}(x)&0xffff);
  return h;
}

}  // namespace

int main() {
  std::ostringstream program;
  for (int i = 0; i < 2000; ++i)
    program << "let value_" << i << " = " << i * 3 << " + " << i % 7 << ".25 * factor_" << i % 13
            << " >= threshold_long_name_" << i % 5 << "\n";
  const std::vector<std::string> toks = tokens(program.str());
  std::map<std::string, int> kinds;
  std::deque<Value> values;
  for (const std::string& t : toks) {
    values.push_back(parse(t));
    ++kinds[std::visit(Describe{}, values.back()).substr(0, 3)];
  }
  LruCache<std::string, std::size_t> cache(256);
  std::size_t hits = 0;
  for (std::size_t i = 0; i < toks.size(); ++i) {
    if (cache.get(toks[i])) ++hits;
    cache.put(toks[i], i);
  }
  auto identifiers = toks | std::views::filter([](const std::string& t) {
                       return std::isalpha(static_cast<unsigned char>(t[0])) != 0;
                     });
  std::set<std::string> unique(identifiers.begin(), identifiers.end());
  const auto longest = std::ranges::max(unique, {}, &std::string::size);
  const std::int64_t sum = std::accumulate(values.begin(), values.end(), std::int64_t{0},
                                           [](std::int64_t acc, const Value& v) {
                                             if (auto p = std::get_if<std::int64_t>(&v))
                                               return acc + *p;
                                             return acc;
                                           });
  std::cout << "tokens " << toks.size() << " unique " << unique.size() << " longest " << longest
            << " hits " << hits << " cache " << cache.size() << " sum " << sum << " checksum "
            << checksum(toks) << '\n';
  for (const auto& [kind, n] : kinds)
    std::cout << kind << ' ' << n << '\n';
  const bool ok = toks.size() == 20000 && unique.size() == 2019 && cache.size() == 256;
  std::cout << (ok ? "ok" : "WRONG") << '\n';
  return ok ? 0 : 1;
}
