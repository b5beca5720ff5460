// libFuzzer target for the parse of a worker's /metrics page into its reported load (untrusted
// engine bytes, polled by EnginePoller). Properties checked on every input: parsing never
// crashes, hangs or reads out of bounds (ASan/UBSan in the fuzz preset); a page that parses gives
// a finite, non-negative KV usage, and parsing it twice gives the same load. Seed corpus:
// fuzz_corpus/engine_load_fuzz (a real `infera engine mock` page, two data-parallel ranks, bad
// values, garbage, edge numbers); CI replays it.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "infera/common/check.h"
#include "infera/gateway/engine_poller.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace infera;
  const std::string_view page(reinterpret_cast<const char*>(data), size);
  const Result<gateway::ReportedLoad> load = gateway::parse_engine_load(page);
  if (!load.ok()) return 0;
  INFERA_CHECK(std::isfinite(load->kv_usage) && load->kv_usage >= 0);
  const Result<gateway::ReportedLoad> again = gateway::parse_engine_load(page);
  INFERA_CHECK(again.ok() && again->waiting == load->waiting && again->running == load->running &&
               again->kv_usage == load->kv_usage);
  return 0;
}
