// TLS contexts from PEM files, for the composition root (`infera server`'s --ssl-certfile,
// --ssl-keyfile and --upstream-ca-file): the contexts ServerOptions::tls and
// ClientOptions::tls_context take, without Asio's SSL headers (tls.h has the rest). Called at
// startup, from any one thread; every error names the file.
#pragma once

#include <memory>
#include <string>

#include "infera/common/status.h"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace infera::http {

// A listener's context (tls.h, make_tls_server_context) from the certificate chain in
// `cert_file` and its private key in `key_file`, both PEM.
Result<std::shared_ptr<boost::asio::ssl::context>> load_tls_server_context(
    const std::string& cert_file, const std::string& key_file);

// A client context that verifies servers against the CA certificates in `ca_file` (a PEM
// bundle) instead of the system's store.
Result<std::shared_ptr<boost::asio::ssl::context>> load_tls_client_context(
    const std::string& ca_file);

}  // namespace infera::http
