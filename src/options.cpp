#include "options.hpp"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace mempool::detail {

namespace {

// "123", "64K", "64M", "1G" (binary multiples); false for anything else.
bool parse_bytes(const char* text, std::size_t* out) noexcept {
  if (text == nullptr || *text < '0' || *text > '9') return false;
  std::size_t value = 0;
  const char* c = text;
  for (; *c >= '0' && *c <= '9'; ++c) {
    const auto digit = static_cast<std::size_t>(*c - '0');
    if (value > (SIZE_MAX - digit) / 10) return false;
    value = value * 10 + digit;
  }
  unsigned shift = 0;
  switch (*c) {
    case '\0':
      break;
    case 'k':
    case 'K':
      shift = 10;
      ++c;
      break;
    case 'm':
    case 'M':
      shift = 20;
      ++c;
      break;
    case 'g':
    case 'G':
      shift = 30;
      ++c;
      break;
    default:
      return false;
  }
  if (*c == 'i' && shift != 0) ++c;
  if ((*c == 'b' || *c == 'B') && shift != 0) ++c;
  if (*c != '\0') return false;
  if (shift != 0 && value > (SIZE_MAX >> shift)) return false;
  *out = value << shift;
  return true;
}

bool parse_flag(const char* text, bool* out) noexcept {
  for (const char* yes : {"1", "yes", "true", "on"})
    if (std::strcmp(text, yes) == 0) return *out = true, true;
  for (const char* no : {"0", "no", "false", "off"})
    if (std::strcmp(text, no) == 0) return *out = false, true;
  return false;
}

void read_bytes(const char* name, std::size_t minimum, std::size_t* value) noexcept {
  // Read once, by the heap's set-up under its init mutex, before any thread of
  // ours could change the environment.
  const char* text = std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
  if (text == nullptr) return;
  std::size_t parsed = 0;
  if (!parse_bytes(text, &parsed) || parsed < minimum) {
    write_stderr_line("ignoring ", name, "=", text);
    return;
  }
  *value = parsed;
}

// A decimal count below kNeverDecay.
bool parse_decimal(const char* text, std::uint64_t* out) noexcept {
  std::uint64_t parsed = 0;
  const char* c = text;
  for (; *c >= '0' && *c <= '9'; ++c) {
    const auto digit = static_cast<std::uint64_t>(*c - '0');
    if (parsed > (kNeverDecay - 1 - digit) / 10) return false;  // too big
    parsed = parsed * 10 + digit;
  }
  if (c == text || *c != '\0') return false;
  *out = parsed;
  return true;
}

// Milliseconds: a decimal count, or "-1" / "never" for kNeverDecay (never_ok), or a
// plain decimal number.
void read_decimal(const char* name, bool never_ok, std::uint64_t* value) noexcept {
  // Read once, by the heap's set-up under its init mutex, before any thread of
  // ours could change the environment.
  const char* text = std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
  if (text == nullptr) return;
  if (never_ok && (std::strcmp(text, "-1") == 0 || std::strcmp(text, "never") == 0)) {
    *value = kNeverDecay;
    return;
  }
  if (!parse_decimal(text, value)) write_stderr_line("ignoring ", name, "=", text);
}

void read_flag(const char* name, bool* value) noexcept {
  // Read once, by the heap's set-up under its init mutex, before any thread of
  // ours could change the environment.
  const char* text = std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
  if (text == nullptr) return;
  if (!parse_flag(text, value)) write_stderr_line("ignoring ", name, "=", text);
}

void read_thp(const char* name, ThpOption* value) noexcept {
  // Read once, as the others (read_bytes).
  const char* text = std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
  if (text == nullptr) return;
  if (std::strcmp(text, "auto") == 0) {
    *value = ThpOption::kAuto;
  } else if (std::strcmp(text, "always") == 0) {
    *value = ThpOption::kAlways;
  } else if (std::strcmp(text, "never") == 0) {
    *value = ThpOption::kNever;
  } else {
    write_stderr_line("ignoring ", name, "=", text);
  }
}

const char* thp_text(ThpOption o) noexcept {
  return o == ThpOption::kAuto ? "auto" : o == ThpOption::kAlways ? "always" : "never";
}

// Decimal without allocating.
const char* to_decimal(std::size_t v, char (&buf)[24]) noexcept {
  char* p = buf + sizeof buf - 1;
  *p = '\0';
  do {
    *--p = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  return p;
}

}  // namespace

void write_stderr_line(const char* a, const char* b, const char* c, const char* d) noexcept {
  char line[512];
  std::size_t n = 0;
  for (const char* part : {"mempool: ", a, b, c, d}) {
    for (; *part != '\0' && n + 1 < sizeof line; ++part)
      line[n++] = *part;
  }
  if (n == 0 || line[n - 1] != '\n') line[n++] = '\n';
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line, n);
}

HeapOptions read_heap_options() noexcept {
  HeapOptions o;
  read_flag("MEMPOOL_VERBOSE", &o.verbose);
  read_flag("MEMPOOL_SHOW_STATS", &o.show_stats);
  read_bytes("MEMPOOL_RELEASE_THRESHOLD", 0, &o.release_threshold);
  read_bytes("MEMPOOL_THREAD_CACHE_BYTES", 0, &o.thread_cache_bytes);
  read_bytes("MEMPOOL_TOTAL_THREAD_CACHE_BYTES", 0, &o.total_thread_cache_bytes);
  read_bytes("MEMPOOL_DIRECT_MAP_THRESHOLD", std::size_t{256} * 1024, &o.direct_map_threshold);
  read_bytes("MEMPOOL_DIRECT_CACHE_BYTES", 0, &o.direct_cache_bytes);
  read_bytes("MEMPOOL_MEMORY_LIMIT", 0, &o.memory_limit);
  read_decimal("MEMPOOL_DECAY_MS", true, &o.decay_ms);
  read_decimal("MEMPOOL_HARDENED_SEED", false, &o.hardened_seed);
  read_decimal("MEMPOOL_HARDENED_SAMPLE", false, &o.hardened_sample);
  read_thp("MEMPOOL_THP", &o.thp);
  // The profiler: on when either is set; a path alone samples at the default rate.
  o.profile_path = std::getenv("MEMPOOL_PROFILE");  // NOLINT(concurrency-mt-unsafe)
  if (o.profile_path != nullptr && *o.profile_path == '\0') o.profile_path = nullptr;
  if (o.profile_path != nullptr) o.profile_rate = kDefaultProfileRate;
  read_bytes("MEMPOOL_PROFILE_RATE", 1, &o.profile_rate);
  read_flag("MEMPOOL_LEAK_CHECK", &o.leak_check);
  o.leak_check_suppressions =
      std::getenv("MEMPOOL_LEAK_CHECK_SUPPRESSIONS");  // NOLINT(concurrency-mt-unsafe)
  std::uint64_t exit_code = static_cast<std::uint64_t>(o.leak_check_exit_code);
  read_decimal("MEMPOOL_LEAK_CHECK_EXITCODE", false, &exit_code);
  if (exit_code > 255) {
    write_stderr_line("ignoring MEMPOOL_LEAK_CHECK_EXITCODE: not in 0-255");
  } else {
    o.leak_check_exit_code = static_cast<int>(exit_code);
  }
  if (o.verbose) {
    char a[24], b[24], c[24], d[24];
    write_stderr_line("options: MEMPOOL_RELEASE_THRESHOLD=", to_decimal(o.release_threshold, a),
                      " MEMPOOL_THREAD_CACHE_BYTES=", to_decimal(o.thread_cache_bytes, b));
    write_stderr_line("options: MEMPOOL_TOTAL_THREAD_CACHE_BYTES=",
                      to_decimal(o.total_thread_cache_bytes, d));
    write_stderr_line(
        "options: MEMPOOL_DIRECT_MAP_THRESHOLD=", to_decimal(o.direct_map_threshold, c),
        o.show_stats ? " MEMPOOL_SHOW_STATS=1" : " MEMPOOL_SHOW_STATS=0", " MEMPOOL_VERBOSE=1");
    write_stderr_line(
        "options: MEMPOOL_DIRECT_CACHE_BYTES=", to_decimal(o.direct_cache_bytes, a),
        " MEMPOOL_DECAY_MS=", o.decay_ms == kNeverDecay ? "never" : to_decimal(o.decay_ms, b));
    write_stderr_line("options: MEMPOOL_MEMORY_LIMIT=",
                      o.memory_limit == 0 ? "0 (none)" : to_decimal(o.memory_limit, c),
                      " MEMPOOL_THP=", thp_text(o.thp));
    if (o.hardened_seed != 0)
      write_stderr_line("options: MEMPOOL_HARDENED_SEED=", to_decimal(o.hardened_seed, d));
    if (o.hardened_sample != kDefaultHardenedSample)
      write_stderr_line("options: MEMPOOL_HARDENED_SAMPLE=", to_decimal(o.hardened_sample, d));
  }
  return o;
}

}  // namespace mempool::detail
