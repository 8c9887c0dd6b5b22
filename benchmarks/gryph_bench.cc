// gryph_bench: the scenario driver behind scripts/bench, in the style of leveldb's db_bench.
//
// Usage: gryph_bench [--workloads=a,b,...] [--seconds=S] [--scratch_dir=DIR]
// Prints one JSON object per line on stdout: {"workload": "<name>", ...figures...}.
//
// Workloads (keys in parentheses):
//   knowledge_update   KnowledgeStream updates per second on a stream of 1,000,000 ticks with
//                      interleaved S ranges and D ticks, in order and shuffled in windows
//                      (updates_per_s, ticks, order)
//   match_one_topic    Matcher: 20,000 subscribers on one topic: add, match, remove
//   match_flat         Matcher: 1,000,000 topics on one level, one subscriber each
//   match_deep         Matcher: 500,000 subscriptions on 4-level topics, 10% with '+' or '#'
//   match_content      Matcher: 1,000,000 selectors over 10 attributes, events matching ~0.1%
//   match_concurrent   Matcher: 1 and 2 reader threads while a writer makes 100,000 changes/s
//                      (the matcher keys are listed in benchmarks/matcher_workloads.cc)
//
// Every figure is the median of several runs; compare figures against the baselines printed in
// the same run, since this machine is small and shared.

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "benchmarks/workload.h"

ABSL_FLAG(std::string, workloads, "", "comma-separated workloads to run; empty runs all");
ABSL_FLAG(double, seconds, 2.0, "target measuring time per figure, in seconds");
ABSL_FLAG(std::string, scratch_dir, "", "directory for on-disk workloads; default: a temp dir");
ABSL_FLAG(bool, list, false, "print the workload names and exit");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("gryph's scenario benchmarks; prints JSON lines");
  absl::ParseCommandLine(argc, argv);
  auto& registry = gryph::bench::Registry();
  if (absl::GetFlag(FLAGS_list)) {
    for (const auto& [name, fn] : registry) std::printf("%s\n", name.c_str());
    return 0;
  }
  std::vector<std::string> names;
  const std::string wanted = absl::GetFlag(FLAGS_workloads);
  if (wanted.empty()) {
    for (const auto& [name, fn] : registry) names.push_back(name);
  } else {
    names = absl::StrSplit(wanted, ',', absl::SkipEmpty());
  }
  for (const std::string& name : names) {
    if (!registry.contains(name)) {
      std::fprintf(stderr, "unknown workload '%s'; known: ", name.c_str());
      for (const auto& [n, fn] : registry) std::fprintf(stderr, "%s ", n.c_str());
      std::fprintf(stderr, "\n");
      return 2;
    }
  }
  std::string scratch = absl::GetFlag(FLAGS_scratch_dir);
  bool remove_scratch = false;
  if (scratch.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gryph-bench-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    scratch = tmpl;
    remove_scratch = true;
  }
  for (const std::string& name : names) {
    gryph::bench::Context ctx;
    ctx.seconds = absl::GetFlag(FLAGS_seconds);
    ctx.scratch_dir = (std::filesystem::path(scratch) / name).string();
    std::filesystem::create_directories(ctx.scratch_dir);
    registry.at(name)(ctx);
    std::filesystem::remove_all(ctx.scratch_dir);
  }
  if (remove_scratch) std::filesystem::remove_all(scratch);
  return 0;
}
