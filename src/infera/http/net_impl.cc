// The compiled part of Boost.Asio and Boost.Beast for the whole project: every other TU is built
// with BOOST_ASIO_SEPARATE_COMPILATION / BOOST_BEAST_SEPARATE_COMPILATION (cmake
// infera_options), so their heavy non-template code is compiled here once.
// clang-format off
#include "infera/http/net.h"  // first: <utility> before Asio
#include <boost/asio/impl/src.hpp>
#include <boost/beast/src.hpp>
// clang-format on
