// An ordinary program that knows nothing of mempool (it does not include or link it): the
// adoption guide's LD_PRELOAD example runs it unchanged. Exits non-zero on a wrong answer.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

int main() {
  std::map<int, std::string> names;
  for (int i = 0; i < 10000; ++i)
    names[i] = "name " + std::to_string(i);
  std::vector<std::unique_ptr<int>> owned;
  std::thread worker([&] {
    for (int i = 0; i < 1000; ++i)
      owned.push_back(std::make_unique<int>(i));
  });
  worker.join();
  char* copy = ::strdup("copied");
  const bool ok = names.size() == 10000 && names[9999] == "name 9999" && owned.size() == 1000 &&
                  *owned.back() == 999 && std::strcmp(copy, "copied") == 0;
  std::free(copy);
  std::printf("plain %d\n", ok);
  return ok ? 0 : 1;
}
