// The object that precompiles <gtest/gtest.h> for every test (tests/CMakeLists.txt).
