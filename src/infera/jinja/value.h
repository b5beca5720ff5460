// Runtime values of the template interpreter and the per-render arena they live in (internal to
// the jinja module). A Value is a small trivially copyable handle: strings, lists and dicts point
// into the render's Arena, into the parsed Program (literals) or into the caller's JSON context
// (zero-copy views), all of which outlive the render, so values are copied freely and never freed
// one by one. Lists and dicts are immutable once built (jinja2's ImmutableSandboxedEnvironment);
// only namespace() objects change. One render owns its Arena and runs on one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace infera::jinja {

enum class Kind : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,  // list, tuple, generator, dict views: see ListFlavor
  kDict,
  kNamespace,  // jinja2's namespace(): the one mutable object
  kMacro,      // a {% macro %} or a {% call %} block's caller
  kFunction,   // a global function (range, namespace, raise_exception, ...): FunctionId in `sub`
  kMethod,     // a method looked up but not called, e.g. `{{ s.upper }}`
  kLoop,       // the `loop` variable of a for loop
};

// Python types a kList stands for; templates can tell them apart (repr, len, indexing, truth).
enum class ListFlavor : uint8_t { kList, kTuple, kGenerator, kDictItems, kDictKeys, kDictValues };

// Why a value is undefined, for the message when it is used (jinja2's Undefined hints).
enum class UndefReason : uint8_t {
  kName,       // 'x' is undefined                 (str = the name)
  kAttribute,  // 'dict object' has no attribute 'x' (str = the attribute, owner = its Kind)
  kElement,    // 'list object' has no element 5     (str = repr of the key, owner = its Kind)
  kMessage,    // free text                          (str = the message)
  kUnsafe,     // access to attribute 'x' of 'list object' is unsafe (sandbox)
  kNotGiven,   // an optional builtin argument the caller left out (never reaches a template)
};

struct Value;
struct DictEntry;
struct NamespaceData;
struct MacroData;
struct MethodData;
struct LoopData;
struct GeneratorData;

struct Value {
  Kind kind = Kind::kUndefined;
  uint8_t sub = 0;  // ListFlavor (kList), FunctionId (kFunction), UndefReason (kUndefined)
  uint8_t owner =
      0;  // kUndefined: the Kind whose attribute/element was missing; kList: tuple owner flavour
  union {
    bool b;
    int64_t i;
    double f;
    const char* str;  // kString; kUndefined: the name, attribute or message
    const Value* items;
    GeneratorData* gen;  // kList with ListFlavor::kGenerator
    const DictEntry* entries;
    NamespaceData* ns;
    const MacroData* macro;
    const MethodData* method;
    LoopData* loop;
  };
  size_t size = 0;  // bytes of str; number of items or entries

  Value() : i(0) {}

  static Value none() {
    Value v;
    v.kind = Kind::kNone;
    return v;
  }
  static Value boolean(bool x) {
    Value v;
    v.kind = Kind::kBool;
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v;
    v.kind = Kind::kInt;
    v.i = x;
    return v;
  }
  static Value floating(double x) {
    Value v;
    v.kind = Kind::kFloat;
    v.f = x;
    return v;
  }
  // A view: `s` must outlive the render (arena, program literal or JSON context).
  static Value string(std::string_view s) {
    Value v;
    v.kind = Kind::kString;
    v.str = s.data();
    v.size = s.size();
    return v;
  }
  static Value list(const Value* items, size_t n, ListFlavor flavor = ListFlavor::kList) {
    Value v;
    v.kind = Kind::kList;
    v.sub = static_cast<uint8_t>(flavor);
    v.items = items;
    v.size = n;
    return v;
  }
  static Value dict(const DictEntry* entries, size_t n) {
    Value v;
    v.kind = Kind::kDict;
    v.entries = entries;
    v.size = n;
    return v;
  }
  static Value undefined(UndefReason why, std::string_view text,
                         Kind owner_kind = Kind::kUndefined) {
    Value v;
    v.kind = Kind::kUndefined;
    v.sub = static_cast<uint8_t>(why);
    v.owner = static_cast<uint8_t>(owner_kind);
    v.str = text.data();
    v.size = text.size();
    return v;
  }

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const {
    return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool;
  }
  std::string_view sv() const { return {str, size}; }
  ListFlavor flavor() const { return static_cast<ListFlavor>(sub); }
  bool is_sequence() const {  // list or tuple: indexable, sized
    return kind == Kind::kList && (flavor() == ListFlavor::kList || flavor() == ListFlavor::kTuple);
  }
};

struct DictEntry {
  Value key;
  Value value;
};

// namespace(): attributes in insertion order; grows in the arena.
struct NamespaceData {
  DictEntry* entries = nullptr;
  size_t size = 0;
  size_t capacity = 0;
};

struct MethodData {
  Value self;
  std::string_view name;
};

// Bump allocator for everything one render creates. Memory is released only when the Arena is
// destroyed. `allocate` returns nullptr instead of passing `limit_bytes` of chunk memory, so a
// template cannot exhaust the process; callers turn that into a resource_exhausted error.
class Arena {
 public:
  explicit Arena(size_t limit_bytes) : limit_(limit_bytes) {}
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  void* allocate(size_t bytes, size_t align);
  template <typename T>
  T* allocate_array(size_t n) {
    if (n > (SIZE_MAX / 2) / sizeof(T)) return nullptr;
    return static_cast<T*>(allocate(n * sizeof(T), alignof(T)));
  }
  // Grows the block [p, p + old_bytes), when it is the most recent allocation and the chunk has
  // room, to new_bytes in place. Lets `s = s + x` run in amortised linear time.
  bool extend(const char* p, size_t old_bytes, size_t new_bytes);
  size_t reserved_bytes() const { return reserved_; }

 private:
  struct Chunk {
    std::unique_ptr<char[]> data;
    size_t size;
  };
  bool add_chunk(size_t min_bytes);

  size_t limit_;
  size_t reserved_ = 0;
  std::vector<Chunk> chunks_;
  char* cur_ = nullptr;
  char* end_ = nullptr;
};

}  // namespace infera::jinja
