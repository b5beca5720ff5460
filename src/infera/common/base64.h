// Standard base64 (RFC 4648, `+/`, `=` padding): etcd's JSON gateway carries keys and values in
// it, kubeconfig embeds certificates in it. Decoding skips line breaks and spaces (PEM-style
// wrapping) and stops at padding; any other foreign character is an error. Pure functions.
#pragma once

#include <string>
#include <string_view>

#include "infera/common/status.h"

namespace infera {

std::string base64_encode(std::string_view in);
Result<std::string> base64_decode(std::string_view in);

}  // namespace infera
