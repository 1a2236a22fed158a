// A fuzz target without libFuzzer: its source built with this main() in every test
// preset (tests/fuzz/CMakeLists.txt, the *_fuzz_replay tests), which runs the committed
// corpus and the regression inputs through LLVMFuzzerTestOneInput, so that an input that
// once crashed a fuzzer stays a test. Arguments: files and folders (every file in a
// folder, in name order, but hidden ones and README*). Each input is passed in a buffer
// of its exact size, as libFuzzer does; its name goes to stderr before it runs, so a
// crash says which input it was.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

namespace fs = std::filesystem;

bool is_input(const fs::directory_entry& entry) {
  const std::string name = entry.path().filename().string();
  return entry.is_regular_file() && name.front() != '.' && name.rfind("README", 0) != 0;
}

// The inputs an argument names, or false when it names neither a file nor a folder.
bool collect(const fs::path& arg, std::vector<fs::path>* inputs) {
  std::error_code error;
  if (fs::is_directory(arg, error)) {
    std::vector<fs::path> found;
    for (const fs::directory_entry& entry : fs::directory_iterator(arg)) {
      if (is_input(entry)) found.push_back(entry.path());
    }
    std::sort(found.begin(), found.end());
    inputs->insert(inputs->end(), found.begin(), found.end());
    return true;
  }
  if (fs::is_regular_file(arg, error)) {
    inputs->push_back(arg);
    return true;
  }
  return false;
}

bool replay(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return false;
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  if (in.bad()) return false;
  const auto data = std::make_unique<std::uint8_t[]>(bytes.size());
  std::copy(bytes.begin(), bytes.end(), data.get());
  std::fprintf(stderr, "Running: %s\n", file.c_str());
  LLVMFuzzerTestOneInput(data.get(), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    if (!collect(argv[i], &inputs)) {
      std::fprintf(stderr, "%s: no such file or folder: %s\n", argv[0], argv[i]);
      return 2;
    }
  }
  for (const fs::path& file : inputs) {
    if (!replay(file)) {
      std::fprintf(stderr, "%s: cannot read %s\n", argv[0], file.c_str());
      return 2;
    }
  }
  std::printf("%zu inputs replayed\n", inputs.size());
  return 0;
}
