// ZmqContext: one ZeroMQ context (its I/O thread) shared by the KV-event subscribers, listeners
// and publishers of a process; the gateway makes one and hands it to each. ZeroMQ types stay out
// of this header. Owned through std::shared_ptr; every socket made from it belongs to an object
// that holds a reference, so the context outlives its sockets. Any thread.
#pragma once

#include <memory>

namespace infera::events {

class ZmqContext {
 public:
  explicit ZmqContext(int io_threads = 1);
  ~ZmqContext();
  ZmqContext(const ZmqContext&) = delete;
  ZmqContext& operator=(const ZmqContext&) = delete;

  struct Impl;  // the cppzmq context, for this module's .cc files
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace infera::events
