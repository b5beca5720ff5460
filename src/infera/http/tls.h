// TLS for infera's HTTP clients and listeners: OpenSSL contexts built from PEM data (a client
// context verifies the peer unless the caller turns it off explicitly; a server context holds
// the listener's certificate chain and key), the per-connection setup of a client (SNI and the
// name the certificate must carry) and the text of a failed handshake. Built at startup; an
// ssl::context is then shared read-only by the connections made with it, on any thread.
// Includes Asio's SSL: only .cc files of modules that speak TLS include it.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>

#include "infera/common/status.h"
#include "infera/http/net.h"

namespace infera::http {

struct TlsClientConfig {
  std::string ca_pem;    // trusted CA certificates (PEM, one or more); empty: the system's store
  std::string cert_pem;  // client certificate chain (PEM); empty: none
  std::string key_pem;   // its private key (PEM)
  bool verify = true;    // verify the server's chain and name (prepare_tls_stream per stream)
};

// A client context (TLS 1.2 or later). Errors name the piece that did not load.
Result<std::shared_ptr<net::ssl::context>> make_tls_client_context(const TlsClientConfig& config);

// A server context (TLS 1.2 or later) presenting `cert_pem` (the leaf certificate first, then
// its intermediates) with `key_pem`, its private key. Errors say which of the two did not load
// (named `cert_name` and `key_name` in the message, e.g. the files they came from) and when the
// key does not belong to the certificate.
Result<std::shared_ptr<net::ssl::context>> make_tls_server_context(
    const std::string& cert_pem, const std::string& key_pem,
    std::string_view cert_name = "the certificate", std::string_view key_name = "the private key");

// Sets SNI (names only) and, when `verify`, the name or IP address the server's certificate
// must carry (OpenSSL's own check, RFC 6125; a mismatch fails the handshake as "hostname
// mismatch" or "IP address mismatch"). `ssl` is a new connection's, before its handshake.
Status prepare_tls(SSL* ssl, const std::string& host, bool verify);

template <class Stream>
Status prepare_tls_stream(Stream& stream, const std::string& host, bool verify) {
  return prepare_tls(stream.native_handle(), host, verify);
}

// The reason a handshake (or a later TLS operation) of `ssl` failed with `ec`, as one phrase
// starting with "TLS: ": "TLS: certificate verify failed (unable to get local issuer
// certificate)" when the peer's certificate was refused, OpenSSL's reason otherwise.
std::string tls_error_text(const beast::error_code& ec, const SSL* ssl);

}  // namespace infera::http
