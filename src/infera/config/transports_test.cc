#include "infera/config/transports.h"

#include <gtest/gtest.h>

namespace infera::config {
namespace {

Transports ok(const TransportInputs& in) {
  auto t = resolve_transports(in);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : Transports{};
}

std::string error(const TransportInputs& in) {
  auto t = resolve_transports(in);
  EXPECT_FALSE(t.ok());
  return t.ok() ? "" : t.status().message();
}

TEST(Transports, NoneOfTheFlagsMeansTheProductionDefaults) {
  const Transports t = ok({});
  EXPECT_EQ(t.discovery, DiscoveryBackend::kKubernetes);
  EXPECT_EQ(t.request, RequestTransport::kNats);
  EXPECT_EQ(t.events, KvEventTransport::kNats);
}

TEST(Transports, SettingsImplyTheirChoices) {
  TransportInputs zmq_worker;
  zmq_worker.workers = zmq_worker.worker_zmq = true;
  Transports t = ok(zmq_worker);
  EXPECT_EQ(t.discovery, DiscoveryBackend::kStatic);
  EXPECT_EQ(t.request, RequestTransport::kHttp);
  EXPECT_EQ(t.events, KvEventTransport::kZmq);

  TransportInputs plain_worker;
  plain_worker.workers = true;  // reached through its NATS subjects
  t = ok(plain_worker);
  EXPECT_EQ(t.discovery, DiscoveryBackend::kStatic);
  EXPECT_EQ(t.request, RequestTransport::kNats);
  EXPECT_EQ(t.events, KvEventTransport::kNats);

  TransportInputs bind;  // --kv-events-bind: engines connect their PUB sockets to the router
  bind.workers = bind.events_bind = true;
  t = ok(bind);
  EXPECT_EQ(t.events, KvEventTransport::kZmq);
  EXPECT_EQ(t.request, RequestTransport::kNats);  // it says nothing of requests

  TransportInputs etcd;
  etcd.etcd = true;
  EXPECT_EQ(ok(etcd).discovery, DiscoveryBackend::kEtcd);
  TransportInputs k8s;
  k8s.k8s = true;
  EXPECT_EQ(ok(k8s).discovery, DiscoveryBackend::kKubernetes);
}

TEST(Transports, ExplicitFlagsWin) {
  TransportInputs dev;
  dev.discovery = DiscoveryBackend::kEtcd;
  dev.etcd = true;
  dev.request = RequestTransport::kHttp;
  dev.events = KvEventTransport::kZmq;
  const Transports t = ok(dev);
  EXPECT_EQ(t.discovery, DiscoveryBackend::kEtcd);
  EXPECT_EQ(t.request, RequestTransport::kHttp);
  EXPECT_EQ(t.events, KvEventTransport::kZmq);
  TransportInputs mixed;  // ZMQ events, NATS requests: works
  mixed.workers = mixed.worker_zmq = true;
  mixed.request = RequestTransport::kNats;
  EXPECT_EQ(ok(mixed).request, RequestTransport::kNats);
  EXPECT_EQ(ok(mixed).events, KvEventTransport::kZmq);
}

TEST(Transports, ImpossibleCombinationsNameTheFlagsToPass) {
  TransportInputs a;
  a.workers = a.worker_zmq = true;
  a.events = KvEventTransport::kNats;
  EXPECT_NE(error(a).find("pass --kv-event-transport zmq"), std::string::npos);
  TransportInputs b;
  b.workers = true;
  b.discovery = DiscoveryBackend::kEtcd;
  EXPECT_NE(error(b).find("--discovery-backend static"), std::string::npos);
  TransportInputs c;
  c.etcd = true;
  c.discovery = DiscoveryBackend::kStatic;
  EXPECT_NE(error(c).find("--discovery-backend etcd"), std::string::npos);
  TransportInputs d;
  d.k8s = true;
  d.discovery = DiscoveryBackend::kEtcd;
  EXPECT_NE(error(d).find("--discovery-backend k8s"), std::string::npos);
  TransportInputs e;
  e.workers = e.etcd = true;
  EXPECT_NE(error(e).find("pass --discovery-backend"), std::string::npos);
  TransportInputs f;
  f.events_bind = true;
  f.events = KvEventTransport::kNats;
  EXPECT_NE(error(f).find("drop --kv-events-bind, or pass --kv-event-transport zmq"), std::string::npos);
}

TEST(Transports, NatsServerComesFromTheFlagThenTheEnvironment) {
  EXPECT_EQ(*resolve_nats_server(false, "nats://localhost:4222", {}), "nats://localhost:4222");
  EXPECT_EQ(*resolve_nats_server(false, "nats://localhost:4222", {"NATS_SERVER=nats://bus:4222"}),
            "nats://bus:4222");
  EXPECT_EQ(*resolve_nats_server(true, "tls://a:1", {"NATS_SERVER=nats://bus:4222"}), "tls://a:1");
  EXPECT_FALSE(resolve_nats_server(true, "http://a:1", {}).ok());
  EXPECT_TRUE(check_namespace("infera").ok());
  EXPECT_TRUE(check_namespace("team-a.prod_1").ok());
  for (const char* bad : {"", "a b", "a..b", ".a", "a*", "a>"}) EXPECT_FALSE(check_namespace(bad).ok()) << bad;
}

}  // namespace
}  // namespace infera::config
