// Worker sources: where the gateway learns its fleet. A source delivers immutable WorkerSet
// snapshots to a listener whenever the fleet changes: StaticWorkerSource once (the --worker
// flags), EtcdWorkerSource on every change of the etcd prefix (docs/contracts.md section 8).
// start()/stop() from the owner's thread; the listener is called on the source's executor (an
// event-loop thread), never concurrently with itself.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "infera/discovery/worker.h"

namespace infera::discovery {

// How a source is doing, for /v1/admin/workers and /metrics: a source that lost its backend
// keeps delivering nothing new while the last known fleet stays in use.
struct SourceHealth {
  bool connected = true;          // the last call to the backend succeeded
  std::string last_error;         // why it is not connected, or the last skipped record
  uint64_t invalid_records = 0;   // records (etcd values, pods) skipped as malformed
  uint64_t resyncs = 0;           // full re-reads (re-lists) since start
  uint64_t records = 0;           // records seen at the last read (pods, keys), routable or not
};

class WorkerSource {
 public:
  using Listener = std::function<void(WorkerSetPtr)>;
  virtual ~WorkerSource() = default;
  // Begins delivering worker sets to `listener`.
  virtual void start(Listener listener) = 0;
  // Stops; no listener call starts after it returns.
  virtual void stop() = 0;
  virtual std::string describe() const = 0;
  // Any thread.
  virtual SourceHealth health() const { return {}; }
};

// A fixed fleet: delivers its set once, from start().
class StaticWorkerSource final : public WorkerSource {
 public:
  explicit StaticWorkerSource(WorkerSet workers)
      : workers_(std::make_shared<const WorkerSet>(std::move(workers))) {}
  void start(Listener listener) override { listener(workers_); }
  void stop() override {}
  std::string describe() const override { return "static"; }

 private:
  WorkerSetPtr workers_;
};

}  // namespace infera::discovery
