// Fake real engines for the launcher tests (`infera engine vllm|sglang`): a `vllm` (or, for
// SGLang, a `python3`) script to put first on PATH. It records its argv (one per line), its
// environment, its signal mask and its pid in its directory, then becomes `infera engine mock`
// with equivalent settings: the same flags, and, as the real engines do, a model that is a
// directory with a tokenizer.json is also the tokenizer. Header-only.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace infera::testing {

// Writes dir/vllm (engine "vllm") or dir/python3 (engine "sglang") running `infera_binary`.
inline void write_fake_engine(const std::filesystem::path& dir, std::string_view engine,
                              const std::string& infera_binary) {
  const bool vllm = engine == "vllm";
  const std::filesystem::path script = dir / (vllm ? "vllm" : "python3");
  std::ofstream out(script);
  out << "#!/bin/sh\n"
      << "dir='" << dir.string()
      << "'\n"
      // The signal mask it was started with, read with builtins before anything forks (the
      // shell blocks signals around its own waits).
      << "while read -r line; do case \"$line\" in SigBlk*) echo \"$line\" > \"$dir/signals\";; "
         "esac; done < /proc/$$/status\n"
      << "printf '%s\\n' \"$@\" > \"$dir/argv\"\n"
      << "env > \"$dir/env\"\n"
      << "echo $$ > \"$dir/pid\"\n";
  if (vllm) {
    out << "[ \"$1\" = serve ] || exit 64\n"
        << "shift\n"
        << "model=\"$1\"\n"
        << "shift\n"
        << "[ -f \"$model/tokenizer.json\" ] && set -- --tokenizer \"$model\" \"$@\"\n"
        << "exec '" << infera_binary
        << "' engine mock --model \"$model\" --log-level warn --request-transport http --kv-event-transport zmq \"$@\"\n";
  } else {
    // SGLang's JSON has no enable switch (the flag enables it); the mock needs it said.
    out << "[ \"$1\" = -m ] && [ \"$2\" = sglang.launch_server ] || exit 64\n"
        << "shift 2\n"
        << "[ \"$1\" = --model-path ] && [ -f \"$2/tokenizer.json\" ] && "
           "set -- --tokenizer \"$2\" \"$@\"\n"
        << "exec '" << infera_binary
        << "' engine mock --enable-kv-events --log-level warn --request-transport http --kv-event-transport zmq \"$@\"\n";
  }
  out.close();
  std::filesystem::permissions(script, std::filesystem::perms::owner_all |
                                           std::filesystem::perms::group_read |
                                           std::filesystem::perms::group_exec);
}

}  // namespace infera::testing
