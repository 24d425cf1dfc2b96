#include "base/status.h"

#include <gtest/gtest.h>

#include <string>
#include <type_traits>

namespace nanprov {
namespace {

Status failsReading() { return Status::Error("disk I/O error"); }

Status readsTheStore() {
  NANPROV_RETURN_IF_ERROR_WITH(failsReading(), "reading runs/a/rank-0.sqlite");
  return Status::Ok();
}

Status readsTheRun() {
  NANPROV_RETURN_IF_ERROR_WITH(readsTheStore(), "loading runs/a");
  return Status::Ok();
}

Status succeeds() { return Status::Ok(); }

Status passesOn() {
  NANPROV_RETURN_IF_ERROR_WITH(succeeds(), "never said");
  return Status::Error("after");
}

// Context is added on the way up, outermost first, as a person reads it.
TEST(Status, ContextIsAddedOnTheWayUp) {
  const Status s = readsTheRun();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "loading runs/a: reading runs/a/rank-0.sqlite: disk I/O error");
}

// Ok stays Ok: no context is made up for a success, and the macro goes on past it.
TEST(Status, OkStaysOkWithContext) {
  EXPECT_TRUE(Status::Ok().withContext("reading").ok());
  EXPECT_EQ(Status::Ok().withContext("reading").message(), "ok");
  EXPECT_EQ(passesOn().message(), "after");
}

StatusOr<int> parsed(bool ok) { return ok ? StatusOr<int>(7) : StatusOr<int>(Status::Error("not a number")); }

Status assigns(bool ok, int* out) {
  NANPROV_ASSIGN_OR_RETURN(int v, parsed(ok));
  *out = v;
  return Status::Ok();
}

TEST(Status, AssignOrReturnPassesTheValueOrTheFailure) {
  int v = 0;
  EXPECT_TRUE(assigns(true, &v).ok());
  EXPECT_EQ(v, 7);
  EXPECT_EQ(assigns(false, &v).message(), "not a number");
}

}  // namespace
}  // namespace nanprov
