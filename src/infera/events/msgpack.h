// MessagePack reader and writer (https://github.com/msgpack/msgpack/blob/master/spec.md), ours
// instead of msgpack-cxx (docs/decisions/0001-own-msgpack-codec.md). The reader is a
// bounds-checked cursor over borrowed bytes: no exceptions, no allocation, a declared length is
// checked against the bytes left and a limit before anything trusts it, nesting is bounded. The
// first error sticks and every later read fails. The writer appends the smallest encoding of
// each value (msgspec's and msgpack-python's choices) to a caller-owned string.
// Both are plain objects owned by one thread at a time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace infera::events {

enum class MsgpackError : uint8_t {
  kNone = 0,
  kTruncated,    // the input ends inside a value, or a declared length exceeds the bytes left
  kInvalidByte,  // 0xc1, the one byte the spec never uses
  kWrongType,    // the value is not of the type the caller asked for
  kTooLarge,     // a declared length (bytes or elements) above the reader's limit
  kTooDeep,      // nesting deeper than the reader's limit
};
std::string_view msgpack_error_name(MsgpackError error);

enum class MsgpackType : uint8_t {
  kNil, kBool, kInt, kFloat, kStr, kBin, kArray, kMap, kExt, kInvalid, kEnd,
};

// An integer of any msgpack family: `negative` tells whether `bits` is a two's-complement int64
// below zero; otherwise `bits` is the unsigned value.
struct MsgpackInt {
  uint64_t bits = 0;
  bool negative = false;
};

struct MsgpackLimits {
  uint32_t max_length = 1u << 24;  // str/bin/ext bytes or array/map elements of one value
  uint32_t max_depth = 32;         // containers nested inside the value being skipped
};

class MsgpackReader {
 public:
  explicit MsgpackReader(std::span<const uint8_t> data, MsgpackLimits limits = {})
      : begin_(data.data()), p_(data.data()), end_(data.data() + data.size()), limits_(limits) {}

  bool ok() const { return error_ == MsgpackError::kNone; }
  MsgpackError error() const { return error_; }
  // Where the first error happened.
  size_t error_position() const { return error_pos_; }
  size_t position() const { return static_cast<size_t>(p_ - begin_); }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  bool at_end() const { return p_ == end_; }
  // The raw bytes from an earlier position() to the cursor.
  std::span<const uint8_t> bytes_from(size_t position) const {
    return {begin_ + position, static_cast<size_t>(p_ - begin_) - position};
  }
  // Moves the cursor back to an earlier position() (a second pass over a map).
  void rewind(size_t position) { p_ = begin_ + position; }

  inline MsgpackType peek() const;
  bool next_is_nil() const { return p_ < end_ && *p_ == 0xc0; }
  // Consumes a nil and returns true; leaves anything else in place and returns false.
  bool skip_nil() {
    if (!next_is_nil()) return false;
    ++p_;
    return true;
  }

  bool read_bool(bool& out);
  inline bool read_int(MsgpackInt& out);
  // Fast path for lists of token ids: reads up to `n` consecutive integers encoded as positive
  // fixint, uint8, uint16 or uint32 into `out` and returns how many it read. It stops early at
  // any other byte (including the end of input) and leaves that value to the general readers.
  inline size_t read_u32_run(uint32_t* out, size_t n);
  // The same for uint64 values (0xcf), the usual encoding of vLLM's block hashes.
  inline size_t read_u64_run(uint64_t* out, size_t n);
  // Any float or integer, as a double.
  bool read_number(double& out);
  bool read_str(std::string_view& out);
  bool read_bin(std::span<const uint8_t>& out);
  // Container headers: `n` elements (arrays) or key/value pairs (maps) follow.
  bool read_array(uint32_t& n);
  bool read_map(uint32_t& n);
  // Skips one complete value of any type, nested up to the depth limit.
  bool skip();

  // Records `error` (the first one sticks) and returns false; for callers with their own checks.
  bool fail(MsgpackError error) {
    if (error_ == MsgpackError::kNone) {
      error_ = error;
      error_pos_ = position();
    }
    p_ = end_;  // every later read fails fast
    return false;
  }

 private:
  bool need(size_t n) { return remaining() >= n ? true : fail(MsgpackError::kTruncated); }
  bool read_length(size_t width, uint32_t& n);
  // Reads the header of any value; for str/bin/ext sets `payload` to the bytes to skip, for
  // containers `elements` to the number of values inside.
  bool read_header(uint64_t& elements, size_t& payload);

  const uint8_t* begin_;
  const uint8_t* p_;
  const uint8_t* end_;
  MsgpackLimits limits_;
  MsgpackError error_ = MsgpackError::kNone;
  size_t error_pos_ = 0;
};

// The bytes of a string (payloads often arrive as std::string or ZMQ frames).
inline std::span<const uint8_t> byte_span(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

namespace msgpack_internal {

// The first bytes of each type that are not ints, in byte order (msgpack spec, "formats"
// table); the rest (fixints, 0xcc-0xd3, negative fixints) are ints.
struct TypeRange {
  int first, last;  // inclusive
  MsgpackType type;
};
inline constexpr TypeRange kTypeRanges[] = {
    {0x80, 0x8f, MsgpackType::kMap},      // fixmap
    {0x90, 0x9f, MsgpackType::kArray},    // fixarray
    {0xa0, 0xbf, MsgpackType::kStr},      // fixstr
    {0xc0, 0xc0, MsgpackType::kNil},      // nil
    {0xc1, 0xc1, MsgpackType::kInvalid},  // never used
    {0xc2, 0xc3, MsgpackType::kBool},     // false, true
    {0xc4, 0xc6, MsgpackType::kBin},      // bin 8/16/32
    {0xc7, 0xc9, MsgpackType::kExt},      // ext 8/16/32
    {0xca, 0xcb, MsgpackType::kFloat},    // float 32/64
    {0xd4, 0xd8, MsgpackType::kExt},      // fixext 1/2/4/8/16
    {0xd9, 0xdb, MsgpackType::kStr},      // str 8/16/32
    {0xdc, 0xdd, MsgpackType::kArray},    // array 16/32
    {0xde, 0xdf, MsgpackType::kMap},      // map 16/32
};

// The type of each first byte.
constexpr std::array<MsgpackType, 256> make_type_table() {
  std::array<MsgpackType, 256> t{};
  t.fill(MsgpackType::kInt);
  for (const TypeRange& r : kTypeRanges) {
    for (int b = r.first; b <= r.last; ++b) t[static_cast<size_t>(b)] = r.type;
  }
  return t;
}
inline constexpr std::array<MsgpackType, 256> kTypeOf = make_type_table();

// Decoding of small unsigned integers from the first 8 bytes read big-endian: the value is
// (x >> shift) & mask, it takes `advance` bytes, and the next value's first byte is
// (x >> next_shift) & 0xff (advance <= 5, so it is inside the same 8 bytes). advance 0 marks
// any other first byte.
struct SmallUint {
  uint8_t advance;
  uint8_t shift;
  uint8_t next_shift;
  uint32_t mask;
};
constexpr std::array<SmallUint, 256> make_small_uint_table() {
  std::array<SmallUint, 256> t{};
  for (int b = 0; b < 0x80; ++b) t[static_cast<size_t>(b)] = {1, 56, 48, 0x7f};
  t[0xcc] = {2, 48, 40, 0xff};
  t[0xcd] = {3, 40, 32, 0xffff};
  t[0xce] = {5, 24, 16, 0xffffffffu};
  return t;
}
inline constexpr std::array<SmallUint, 256> kSmallUint = make_small_uint_table();

}  // namespace msgpack_internal

MsgpackType MsgpackReader::peek() const {
  return p_ < end_ ? msgpack_internal::kTypeOf[*p_] : MsgpackType::kEnd;
}

size_t MsgpackReader::read_u32_run(uint32_t* out, size_t n) {
  const uint8_t* p = p_;
  size_t i = 0;
  if (end_ - p < 8) return 0;
  // One unaligned 8-byte load per value covers all four encodings, and it already holds the
  // next value's first byte: the loop-carried chain is one table lookup and a shift, not two
  // dependent loads, so a token costs a few cycles whatever the mix of widths.
  uint32_t b = *p;
  while (i < n && end_ - p >= 8) {
    const msgpack_internal::SmallUint c = msgpack_internal::kSmallUint[b];
    if (c.advance == 0) break;
    uint64_t x;
    std::memcpy(&x, p, 8);
    x = __builtin_bswap64(x);
    out[i++] = static_cast<uint32_t>((x >> c.shift) & c.mask);
    p += c.advance;
    b = static_cast<uint32_t>((x >> c.next_shift) & 0xff);
  }
  p_ = p;
  return i;
}

// Fast path for lists of hashes: reads up to `n` consecutive uint64 (0xcf) values.
size_t MsgpackReader::read_u64_run(uint64_t* out, size_t n) {
  const uint8_t* p = p_;
  size_t i = 0;
  while (i < n && end_ - p >= 9 && *p == 0xcf) {
    uint64_t x;
    std::memcpy(&x, p + 1, 8);
    out[i++] = __builtin_bswap64(x);
    p += 9;
  }
  p_ = p;
  return i;
}

// Big-endian loads of the widths msgpack uses.
inline uint64_t load_be(const uint8_t* p, size_t width) {
  uint64_t v = 0;
  for (size_t i = 0; i < width; ++i) v = (v << 8) | p[i];
  return v;
}

// Integers are the hot path of event decoding (token ids, hashes): inline.
inline bool MsgpackReader::read_int(MsgpackInt& out) {
  if (p_ >= end_) return fail(MsgpackError::kTruncated);
  const uint8_t b = *p_;
  if (b < 0x80) {  // positive fixint
    out = {b, false};
    ++p_;
    return true;
  }
  if (b >= 0xe0) {  // negative fixint
    out = {static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(b))), true};
    ++p_;
    return true;
  }
  size_t width = 0;
  bool is_signed = false;
  switch (b) {
    case 0xcc: width = 1; break;
    case 0xcd: width = 2; break;
    case 0xce: width = 4; break;
    case 0xcf: width = 8; break;
    case 0xd0: width = 1; is_signed = true; break;
    case 0xd1: width = 2; is_signed = true; break;
    case 0xd2: width = 4; is_signed = true; break;
    case 0xd3: width = 8; is_signed = true; break;
    default: return fail(b == 0xc1 ? MsgpackError::kInvalidByte : MsgpackError::kWrongType);
  }
  if (!need(1 + width)) return false;
  uint64_t v = load_be(p_ + 1, width);
  p_ += 1 + width;
  if (is_signed) {
    // Sign-extend from `width` bytes.
    const unsigned shift = static_cast<unsigned>(64 - 8 * width);
    const int64_t s = static_cast<int64_t>(v << shift) >> shift;
    out = {static_cast<uint64_t>(s), s < 0};
  } else {
    out = {v, false};
  }
  return true;
}

// Appends msgpack values to `out`, always in the smallest encoding; non-negative integers use
// the unsigned families (as msgspec and msgpack-python do), floats are always float64.
class MsgpackWriter {
 public:
  explicit MsgpackWriter(std::string& out) : out_(out) {}

  void nil() { byte(0xc0); }
  void boolean(bool v) { byte(v ? 0xc3 : 0xc2); }
  void uint(uint64_t v);
  void sint(int64_t v);  // non-negative values go through uint()
  void float64(double v);
  void str(std::string_view s);
  void bin(std::span<const uint8_t> b);
  void array(uint32_t n);
  void map(uint32_t n);
  // Bytes that already are msgpack (a value kept verbatim from a decoded payload).
  void raw(std::span<const uint8_t> b) {
    out_.append(reinterpret_cast<const char*>(b.data()), b.size());
  }

 private:
  void byte(uint8_t b) { out_.push_back(static_cast<char>(b)); }
  void be(uint8_t tag, uint64_t v, size_t width);

  std::string& out_;
};

}  // namespace infera::events
