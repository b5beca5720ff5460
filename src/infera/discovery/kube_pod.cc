#include "infera/discovery/kube_pod.h"

#include <boost/json.hpp>

#include <charconv>

namespace infera::discovery {
namespace json = boost::json;
namespace {

const json::object* object_at(const json::object* o, std::string_view key) {
  if (!o) return nullptr;
  const json::value* v = o->if_contains(key);
  return v ? v->if_object() : nullptr;
}

const json::array* array_at(const json::object* o, std::string_view key) {
  if (!o) return nullptr;
  const json::value* v = o->if_contains(key);
  return v ? v->if_array() : nullptr;
}

std::string string_at(const json::object* o, std::string_view key) {
  if (!o) return {};
  const json::value* v = o->if_contains(key);
  if (!v || !v->is_string()) return {};
  return std::string(v->get_string());
}

uint32_t port_number(const json::value* v) {
  if (!v) return 0;
  if (v->is_int64() && v->get_int64() > 0 && v->get_int64() <= 65535) {
    return static_cast<uint32_t>(v->get_int64());
  }
  if (v->is_uint64() && v->get_uint64() > 0 && v->get_uint64() <= 65535) {
    return static_cast<uint32_t>(v->get_uint64());
  }
  return 0;
}

// String values only; a label or annotation of another type is not Kubernetes and is ignored.
std::map<std::string, std::string> string_map(const json::object* o) {
  std::map<std::string, std::string> out;
  if (!o) return out;
  for (const auto& [k, v] : *o) {
    if (v.is_string()) out.emplace(std::string(k), std::string(v.get_string()));
  }
  return out;
}

Result<json::value> parse_json(std::string_view text, std::string_view what) {
  boost::system::error_code ec;
  json::parse_options options;
  options.max_depth = 64;
  json::value v = json::parse(text, ec, {}, options);
  if (ec) return data_loss(std::string(what) + " is not JSON: " + ec.message());
  return v;
}

Result<KubePod> pod_from(const json::object& o) {
  KubePod p;
  const json::object* meta = object_at(&o, "metadata");
  if (!meta) return data_loss("pod without metadata");
  p.name = string_at(meta, "name");
  p.uid = string_at(meta, "uid");
  p.ns = string_at(meta, "namespace");
  p.resource_version = string_at(meta, "resourceVersion");
  if (p.uid.empty() && p.name.empty()) return data_loss("pod without a name or uid");
  if (p.uid.empty()) p.uid = p.ns + "/" + p.name;
  if (const json::value* d = meta->if_contains("deletionTimestamp"); d && !d->is_null()) {
    p.terminating = true;
  }
  p.labels = string_map(object_at(meta, "labels"));
  p.annotations = string_map(object_at(meta, "annotations"));
  if (const json::array* containers = array_at(object_at(&o, "spec"), "containers")) {
    for (const json::value& c : *containers) {
      const json::array* ports = array_at(c.if_object(), "ports");
      if (!ports) continue;
      for (const json::value& port : *ports) {
        const json::object* po = port.if_object();
        if (!po) continue;
        const uint32_t n = port_number(po->if_contains("containerPort"));
        if (n) p.ports.push_back({string_at(po, "name"), n});
      }
    }
  }
  const json::object* status = object_at(&o, "status");
  p.pod_ip = string_at(status, "podIP");
  p.phase = string_at(status, "phase");
  if (const json::array* conditions = array_at(status, "conditions")) {
    for (const json::value& c : *conditions) {
      const json::object* co = c.if_object();
      if (co && string_at(co, "type") == "Ready") p.ready = string_at(co, "status") == "True";
    }
  }
  return p;
}

Result<uint32_t> annotation_port(const KubePod& pod, std::string_view key, uint32_t fallback) {
  const auto it = pod.annotations.find(std::string(key));
  if (it == pod.annotations.end()) return fallback;
  uint32_t v = 0;
  const std::string& s = it->second;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v == 0 || v > 65535) {
    return invalid_argument("annotation " + std::string(key) + "='" + s.substr(0, 64) +
                            "' is not a port number");
  }
  return v;
}

Result<Role> pod_role(const KubePod& pod, const KubePodRules& rules) {
  if (rules.role) return *rules.role;
  const auto it = pod.labels.find(std::string(kRoleLabel));
  if (it == pod.labels.end() || it->second == "prefill-decode" || it->second == "both") {
    return Role::kBoth;
  }
  if (it->second == "prefill") return Role::kPrefill;
  if (it->second == "decode") return Role::kDecode;
  return invalid_argument("label " + std::string(kRoleLabel) + "='" + it->second.substr(0, 64) +
                          "' is not prefill, decode or prefill-decode");
}

std::string annotation(const KubePod& pod, std::string_view key, std::string_view fallback) {
  const auto it = pod.annotations.find(std::string(key));
  return it == pod.annotations.end() ? std::string(fallback) : it->second;
}

}  // namespace

Result<KubePod> parse_kube_pod(std::string_view text) {
  INFERA_ASSIGN_OR_RETURN(const json::value v, parse_json(text, "pod"));
  if (!v.is_object()) return data_loss("pod is not a JSON object");
  return pod_from(v.get_object());
}

Result<KubePodList> parse_kube_pod_list(std::string_view text) {
  INFERA_ASSIGN_OR_RETURN(const json::value v, parse_json(text, "pod list"));
  const json::object* o = v.if_object();
  if (!o || string_at(o, "kind") != "PodList") return data_loss("not a PodList");
  KubePodList list;
  const json::object* meta = object_at(o, "metadata");
  list.resource_version = string_at(meta, "resourceVersion");
  list.continue_token = string_at(meta, "continue");
  if (const json::array* items = array_at(o, "items")) {
    list.items.reserve(items->size());
    for (const json::value& item : *items) {
      const json::object* io = item.if_object();
      auto pod = io ? pod_from(*io) : Result<KubePod>(data_loss("item is not an object"));
      if (pod.ok()) {
        list.items.push_back(std::move(*pod));
      } else {
        list.skipped.push_back(string_at(object_at(io, "metadata"), "name") + ": " +
                               std::string(pod.status().message()));
      }
    }
  }
  return list;
}

Result<KubeWatchEvent> parse_kube_watch_event(std::string_view line) {
  INFERA_ASSIGN_OR_RETURN(const json::value v, parse_json(line, "watch event"));
  const json::object* o = v.if_object();
  if (!o) return data_loss("watch event is not an object");
  const std::string type = string_at(o, "type");
  const json::object* object = object_at(o, "object");
  if (!object) return data_loss("watch event without an object");
  KubeWatchEvent ev;
  if (type == "ERROR") {
    ev.type = KubeWatchEvent::Type::kError;
    const json::value* code = object->if_contains("code");
    ev.error_code = code && code->is_int64() ? static_cast<int>(code->get_int64()) : 0;
    ev.error_message = string_at(object, "message");
    return ev;
  }
  if (type == "BOOKMARK") {
    ev.type = KubeWatchEvent::Type::kBookmark;
    ev.pod.resource_version = string_at(object_at(object, "metadata"), "resourceVersion");
    if (ev.pod.resource_version.empty()) return data_loss("bookmark without a resourceVersion");
    return ev;
  }
  if (type == "ADDED") {
    ev.type = KubeWatchEvent::Type::kAdded;
  } else if (type == "MODIFIED") {
    ev.type = KubeWatchEvent::Type::kModified;
  } else if (type == "DELETED") {
    ev.type = KubeWatchEvent::Type::kDeleted;
  } else {
    return data_loss("unknown watch event type '" + type.substr(0, 32) + "'");
  }
  INFERA_ASSIGN_OR_RETURN(ev.pod, pod_from(*object));
  return ev;
}

Result<KubeInferencePool> parse_kube_inference_pool(std::string_view text) {
  INFERA_ASSIGN_OR_RETURN(const json::value v, parse_json(text, "InferencePool"));
  const json::object* spec = object_at(v.if_object(), "spec");
  if (!spec) return data_loss("InferencePool without a spec");
  // v1: spec.selector.matchLabels; v1alpha2: spec.selector is the label map itself.
  const json::object* selector = object_at(spec, "selector");
  if (const json::object* match = object_at(selector, "matchLabels")) selector = match;
  KubeInferencePool pool;
  for (const auto& [k, val] : string_map(selector)) {
    if (!pool.label_selector.empty()) pool.label_selector += ',';
    pool.label_selector += k + "=" + val;
  }
  if (pool.label_selector.empty()) return data_loss("InferencePool has an empty selector");
  if (const json::array* ports = array_at(spec, "targetPorts"); ports && !ports->empty()) {
    pool.target_port = port_number((*ports)[0].is_object()
                                       ? (*ports)[0].get_object().if_contains("number")
                                       : nullptr);
  } else {
    pool.target_port = port_number(spec->if_contains("targetPortNumber"));
  }
  return pool;
}

Result<uint32_t> kube_pod_port(const KubePod& pod, uint32_t target_port) {
  INFERA_ASSIGN_OR_RETURN(const uint32_t annotated, annotation_port(pod, kPortAnnotation, 0));
  if (annotated) return annotated;
  for (const KubePod::Port& p : pod.ports) {
    if (p.name == "http") return p.number;
  }
  if (target_port) return target_port;
  if (!pod.ports.empty()) return pod.ports.front().number;
  return invalid_argument("no port: no annotation " + std::string(kPortAnnotation) +
                          ", no container port");
}

Result<std::optional<WorkerInfo>> kube_pod_worker(const KubePod& pod, const KubePodRules& rules) {
  // Annotations and labels are checked first, so a bad one is reported even before the pod is
  // Ready (and once, not at every readiness flip).
  INFERA_ASSIGN_OR_RETURN(const uint32_t port, kube_pod_port(pod, rules.target_port));
  INFERA_ASSIGN_OR_RETURN(const uint32_t kv_port,
                          annotation_port(pod, kKvEventsPortAnnotation, kDefaultKvEventsPort));
  INFERA_ASSIGN_OR_RETURN(const uint32_t replay_port,
                          annotation_port(pod, kKvReplayPortAnnotation, kDefaultKvReplayPort));
  INFERA_ASSIGN_OR_RETURN(const uint32_t bootstrap, annotation_port(pod, kBootstrapPortAnnotation, 0));
  INFERA_ASSIGN_OR_RETURN(const Role role, pod_role(pod, rules));
  if (!pod.ready || pod.terminating || pod.pod_ip.empty() ||
      (!pod.phase.empty() && pod.phase != "Running")) {
    return std::optional<WorkerInfo>();
  }
  const bool v6 = pod.pod_ip.find(':') != std::string::npos;
  const std::string host = v6 ? "[" + pod.pod_ip + "]" : pod.pod_ip;
  WorkerInfo w;
  w.url = "http://" + host + ":" + std::to_string(port);
  auto id = worker_id_from_url(w.url);
  if (!id.ok()) return invalid_argument("podIP '" + pod.pod_ip.substr(0, 64) + "' is not an address");
  w.id = std::move(*id);
  w.role = role;
  w.kv_endpoint = "tcp://" + host + ":" + std::to_string(kv_port);
  w.replay_endpoint = "tcp://" + host + ":" + std::to_string(replay_port);
  w.topic = annotation(pod, kKvTopicAnnotation, kDefaultKvTopic);
  w.engine = annotation(pod, kEngineAnnotation, kDefaultEngine);
  w.bootstrap_port = bootstrap;
  return std::optional<WorkerInfo>(std::move(w));
}

}  // namespace infera::discovery
