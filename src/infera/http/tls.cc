#include "infera/http/tls.h"

// Asio is compiled separately (net_impl.cc); its SSL part is compiled here, with OpenSSL.
#include <boost/asio/ssl/impl/src.hpp>

namespace infera::http {

Result<std::shared_ptr<net::ssl::context>> make_tls_client_context(const TlsClientConfig& config) {
  auto ctx = std::make_shared<net::ssl::context>(net::ssl::context::tls_client);
  boost::system::error_code ec;
  ctx->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                       net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                       net::ssl::context::no_tlsv1_1,
                   ec);
  if (ec) return internal_error("TLS: cannot set protocol options: " + ec.message());
  if (config.verify) {
    ctx->set_verify_mode(net::ssl::verify_peer, ec);
    if (!ec) {
      if (config.ca_pem.empty()) {
        ctx->set_default_verify_paths(ec);
      } else {
        ctx->add_certificate_authority(net::buffer(config.ca_pem), ec);
      }
    }
    if (ec) return invalid_argument("TLS: cannot load the CA certificate: " + ec.message());
  } else {
    ctx->set_verify_mode(net::ssl::verify_none, ec);
  }
  if (!config.cert_pem.empty()) {
    ctx->use_certificate_chain(net::buffer(config.cert_pem), ec);
    if (ec) return invalid_argument("TLS: cannot load the client certificate: " + ec.message());
    ctx->use_private_key(net::buffer(config.key_pem), net::ssl::context::pem, ec);
    if (ec) return invalid_argument("TLS: cannot load the client key: " + ec.message());
  }
  return ctx;
}

}  // namespace infera::http
