// Test-only: a throwaway certificate authority made with the `openssl` command line (Debian's
// openssl package, scripts/packages/test.txt) in a temporary directory: a CA, a server
// certificate it signed for 127.0.0.1 and localhost, and a second, unrelated CA (what a client
// that trusts the wrong authority has). EC P-256 keys, valid for two days. Removed with the
// object. One test thread.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "infera/common/subprocess.h"

namespace infera::http::testing {

class TestCa {
 public:
  TestCa() {
    static std::atomic<int> counter{0};
    dir_ = std::filesystem::temp_directory_path() /
           ("infera_test_ca_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    ok_ = make_ca("ca", "infera test CA") && make_ca("other_ca", "another test CA") &&
          issue("server", "127.0.0.1", "IP:127.0.0.1,DNS:localhost") &&
          issue("name_only", "worker.example", "DNS:worker.example");
  }
  ~TestCa() { std::filesystem::remove_all(dir_); }
  TestCa(const TestCa&) = delete;
  TestCa& operator=(const TestCa&) = delete;

  // Every file was made; the log says why not otherwise.
  bool ok() const { return ok_; }
  std::string log() const { return read(path("openssl.log")); }

  std::string path(const std::string& file) const { return (dir_ / file).string(); }
  std::string read(const std::string& path_name) const {
    std::ifstream in(path_name);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  std::string ca_file() const { return path("ca.pem"); }              // trusts server.pem
  std::string other_ca_file() const { return path("other_ca.pem"); }  // trusts nothing here
  std::string cert_file() const { return path("server.pem"); }        // 127.0.0.1, localhost
  std::string key_file() const { return path("server.key"); }
  // A certificate for worker.example only: right CA, wrong name for 127.0.0.1.
  std::string name_only_cert_file() const { return path("name_only.pem"); }
  std::string name_only_key_file() const { return path("name_only.key"); }

 private:
  bool run(std::vector<std::string> argv) {
    argv.insert(argv.begin(), "openssl");
    const Result<int> code = run_process(argv, std::chrono::seconds(30), path("openssl.log"));
    return code.ok() && *code == 0;
  }

  bool make_ca(const std::string& name, const std::string& cn) {
    return run({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", path(name + ".key"), "-out", path(name + ".pem"), "-days",
                "2", "-subj", "/CN=" + cn, "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign"});
  }

  bool issue(const std::string& name, const std::string& cn, const std::string& san) {
    std::ofstream(path(name + ".ext"))
        << "subjectAltName=" << san << "\nbasicConstraints=CA:FALSE\n"
        << "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n";
    return run({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", path(name + ".key"), "-out", path(name + ".csr"), "-subj",
                "/CN=" + cn}) &&
           run({"x509", "-req", "-in", path(name + ".csr"), "-CA", path("ca.pem"), "-CAkey",
                path("ca.key"), "-set_serial", std::to_string(++serial_), "-days", "2",
                "-extfile", path(name + ".ext"), "-out", path(name + ".pem")});
  }

  std::filesystem::path dir_;
  int serial_ = 1;
  bool ok_ = false;
};

}  // namespace infera::http::testing
