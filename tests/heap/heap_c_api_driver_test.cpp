// Runs the C translation unit (c_api_test.c) that includes <mempool/mempool.h>.
#include <gtest/gtest.h>

extern "C" int mempool_c_api_check(void);

namespace {

TEST(HeapCApi, FromC) {
  EXPECT_EQ(mempool_c_api_check(), 0) << "the check at this line of c_api_test.c failed";
}

}  // namespace
