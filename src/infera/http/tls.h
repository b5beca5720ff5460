// TLS for infera's HTTP clients (the Kubernetes API today): an OpenSSL client context built from
// PEM data, with peer verification on unless the caller turns it off explicitly. Built at
// startup; an ssl::context is then shared read-only by the connections made with it.
// Includes Asio's SSL: only .cc files of modules that speak TLS include it.
#pragma once

#include <memory>
#include <string>

#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>

#include "infera/common/status.h"
#include "infera/http/net.h"

namespace infera::http {

struct TlsClientConfig {
  std::string ca_pem;    // trusted CA certificates (PEM, one or more); empty: the system's store
  std::string cert_pem;  // client certificate chain (PEM); empty: none
  std::string key_pem;   // its private key (PEM)
  bool verify = true;    // verify the server's chain and name (SetHostVerification per stream)
};

// A client context (TLS 1.2 or later). Errors name the piece that did not load.
Result<std::shared_ptr<net::ssl::context>> make_tls_client_context(const TlsClientConfig& config);

// Sets SNI (names only) and the name or IP address the server's certificate must carry, on a
// stream made from a context that verifies.
template <class Stream>
Status prepare_tls_stream(Stream& stream, const std::string& host, bool verify) {
  const bool is_ip = host.find_first_not_of("0123456789.") == std::string::npos ||
                     host.find(':') != std::string::npos;
  if (!is_ip && !SSL_set_tlsext_host_name(stream.native_handle(), host.c_str())) {
    return invalid_argument("TLS: cannot set the server name " + host);
  }
  if (verify) stream.set_verify_callback(net::ssl::host_name_verification(host));
  return ok_status();
}

}  // namespace infera::http
