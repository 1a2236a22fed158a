// The heap tests' name for the shared test support (tests/support/test_support.hpp).
#pragma once

#include "../support/test_support.hpp"

namespace heap_test = mempool_test;
