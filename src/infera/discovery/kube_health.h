// KubeHealth: how a watcher of the Kubernetes API is doing (the worker source's and the router
// membership's): whether the API answers, the last error, the records skipped as malformed and
// the re-lists. Each change of reachability is logged once, each skipped record's reason once
// (up to 10,000 reasons, so a flood of bad pods cannot grow it without bound). Thread-safe.
#pragma once

#include <cstddef>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

#include "infera/common/status.h"
#include "infera/discovery/source.h"

namespace infera::discovery {

class KubeHealth {
 public:
  // How the log lines read; each a string literal (kept as views).
  struct Wording {
    std::string_view component;  // the log component: "discovery", "replica"
    std::string_view kept;       // what stays while the API is away: "workers", "peers"
    std::string_view skipping;   // a skipped record's log line: "skipping pod"
  };

  // `api`: the API server as logged (KubeApi::describe); `connected`: the state before the
  // first answer.
  KubeHealth(Wording wording, std::string api, bool connected);

  void set_connected(bool connected, const Status& why);
  // A record skipped as malformed: `what` names it (a pod, "watch event").
  void note_invalid(const std::string& what, const Status& why);
  // A full re-read (list) that saw `records` records.
  void note_listed(size_t records);
  SourceHealth get() const;

 private:
  const Wording wording_;
  const std::string api_;
  mutable std::mutex mu_;
  SourceHealth health_;             // guarded by mu_
  std::set<std::string> reported_;  // "what: reason" already logged; guarded by mu_
};

}  // namespace infera::discovery
