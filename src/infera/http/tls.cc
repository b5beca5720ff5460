#include "infera/http/tls.h"

// Asio is compiled separately (net_impl.cc); its SSL part is compiled here, with OpenSSL.
#include <boost/asio/ssl/impl/src.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "infera/http/stream.h"
#include "infera/http/tls_files.h"

namespace infera::http {
namespace {

constexpr size_t kMaxPemFileBytes = size_t{1} << 20;  // a chain or a CA bundle is far smaller

// The whole of a PEM file, at most kMaxPemFileBytes; errors name the file.
Result<std::string> read_pem_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_argument("TLS: cannot read " + path + ": " + std::strerror(errno));
  std::string text;
  text.resize(kMaxPemFileBytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return invalid_argument("TLS: cannot read " + path);
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxPemFileBytes) {
    return invalid_argument("TLS: " + path + " is larger than 1 MiB; not a PEM file");
  }
  return text;
}

// TLS 1.2 or later, no compression (CRIME), the usual interoperability workarounds.
Status set_protocol_options(net::ssl::context& ctx) {
  boost::system::error_code ec;
  ctx.set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                      net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                      net::ssl::context::no_tlsv1_1 | net::ssl::context::no_compression,
                  ec);
  if (ec) return internal_error("TLS: cannot set protocol options: " + ec.message());
  if (SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION) != 1) {
    return internal_error("TLS: cannot require TLS 1.2");
  }
  return ok_status();
}

}  // namespace

Result<std::shared_ptr<net::ssl::context>> make_tls_client_context(const TlsClientConfig& config) {
  auto ctx = std::make_shared<net::ssl::context>(net::ssl::context::tls_client);
  INFERA_RETURN_IF_ERROR(set_protocol_options(*ctx));
  boost::system::error_code ec;
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

Result<std::shared_ptr<net::ssl::context>> make_tls_server_context(const std::string& cert_pem,
                                                                   const std::string& key_pem,
                                                                   std::string_view cert_name,
                                                                   std::string_view key_name) {
  if (cert_pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return invalid_argument("TLS: " + std::string(cert_name) + " holds no PEM certificate");
  }
  if (key_pem.find("PRIVATE KEY-----") == std::string::npos) {
    return invalid_argument("TLS: " + std::string(key_name) + " holds no PEM private key");
  }
  auto ctx = std::make_shared<net::ssl::context>(net::ssl::context::tls_server);
  INFERA_RETURN_IF_ERROR(set_protocol_options(*ctx));
  boost::system::error_code ec;
  ctx->use_certificate_chain(net::buffer(cert_pem), ec);
  if (ec) {
    return invalid_argument("TLS: cannot load " + std::string(cert_name) +
                            " (a PEM certificate chain): " + ec.message());
  }
  ctx->use_private_key(net::buffer(key_pem), net::ssl::context::pem, ec);
  if (ec) {
    return invalid_argument("TLS: cannot load " + std::string(key_name) +
                            " (a PEM private key of the certificate): " + ec.message());
  }
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    return invalid_argument("TLS: " + std::string(key_name) + " is not the key of " +
                            std::string(cert_name));
  }
  return ctx;
}

Status prepare_tls(SSL* ssl, const std::string& host, bool verify) {
  boost::system::error_code not_ip;
  (void)net::ip::make_address(host, not_ip);
  if (not_ip) {
    // SNI carries names only (RFC 6066).
    if (SSL_set_tlsext_host_name(ssl, host.c_str()) != 1) {
      return invalid_argument("TLS: cannot set the server name " + host);
    }
    if (verify && SSL_set1_host(ssl, host.c_str()) != 1) {
      return invalid_argument("TLS: cannot verify the server name " + host);
    }
  } else if (verify && X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str()) != 1) {
    return invalid_argument("TLS: cannot verify the server address " + host);
  }
  return ok_status();
}

std::string tls_error_text(const beast::error_code& ec, const SSL* ssl) {
  const long verify = ssl == nullptr ? X509_V_OK : SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) {
    return std::string("TLS: certificate verify failed (") +
           X509_verify_cert_error_string(verify) + ")";
  }
  return "TLS: " + ec.message();
}

Result<std::shared_ptr<net::ssl::context>> load_tls_server_context(const std::string& cert_file,
                                                                   const std::string& key_file) {
  INFERA_ASSIGN_OR_RETURN(const std::string cert, read_pem_file(cert_file));
  INFERA_ASSIGN_OR_RETURN(const std::string key, read_pem_file(key_file));
  return make_tls_server_context(cert, key, cert_file, key_file);
}

Result<std::shared_ptr<net::ssl::context>> load_tls_client_context(const std::string& ca_file) {
  INFERA_ASSIGN_OR_RETURN(const std::string ca, read_pem_file(ca_file));
  if (ca.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return invalid_argument("TLS: " + ca_file + " holds no PEM certificate");
  }
  TlsClientConfig config;
  config.ca_pem = ca;
  Result<std::shared_ptr<net::ssl::context>> made = make_tls_client_context(config);
  if (!made.ok()) return invalid_argument(made.status().message() + " (" + ca_file + ")");
  return made;
}

void Stream::send_close_notify() {
  if (!tls_ || !socket_.is_open()) return;
  SSL* ssl = tls_->native_handle();
  if (SSL_is_init_finished(ssl) != 1 || (SSL_get_shutdown(ssl) & SSL_SENT_SHUTDOWN) != 0) return;
  beast::error_code ec;
  // Never waits: the socket must not block (then the wait for the peer's close_notify, which
  // follows the send, fails at once with would_block).
  if (!socket_.non_blocking()) socket_.non_blocking(true, ec);
  if (!ec) tls_->shutdown(ec);
}

}  // namespace infera::http
