#pragma once
/// What the scenario tests share: the report of a scenario run, printed, or the test
/// fails with the scenario's error.
#include <catch2/catch.hpp>

#include <cstdio>
#include <utility>

#include "messages/result.hpp"

namespace apiary::testing {

/// The report of a successful run (the test fails with the error of a failed one),
/// printed under `name` with the scenario's format_report().
template <class Report>
Report report_or_fail(Result<Report> report, const char* name) {
  if (!report) FAIL(report.error().what());
  std::printf("[%s]\n%s", name, format_report(report.value()).c_str());
  return std::move(report.value());
}

}  // namespace apiary::testing
