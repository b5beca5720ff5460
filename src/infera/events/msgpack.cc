#include "infera/events/msgpack.h"

#include <bit>

namespace infera::events {

std::string_view msgpack_error_name(MsgpackError error) {
  switch (error) {
    case MsgpackError::kNone: return "none";
    case MsgpackError::kTruncated: return "truncated";
    case MsgpackError::kInvalidByte: return "invalid_byte";
    case MsgpackError::kWrongType: return "wrong_type";
    case MsgpackError::kTooLarge: return "too_large";
    case MsgpackError::kTooDeep: return "too_deep";
  }
  return "?";
}

bool MsgpackReader::read_bool(bool& out) {
  if (!need(1)) return false;
  if (*p_ != 0xc2 && *p_ != 0xc3) return fail(MsgpackError::kWrongType);
  out = *p_ == 0xc3;
  ++p_;
  return true;
}

bool MsgpackReader::read_number(double& out) {
  if (!need(1)) return false;
  if (*p_ == 0xcb) {
    if (!need(9)) return false;
    out = std::bit_cast<double>(load_be(p_ + 1, 8));
    p_ += 9;
    return true;
  }
  if (*p_ == 0xca) {
    if (!need(5)) return false;
    out = static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(load_be(p_ + 1, 4))));
    p_ += 5;
    return true;
  }
  MsgpackInt v;
  if (peek() != MsgpackType::kInt) {
    return fail(*p_ == 0xc1 ? MsgpackError::kInvalidByte : MsgpackError::kWrongType);
  }
  if (!read_int(v)) return false;
  out = v.negative ? static_cast<double>(static_cast<int64_t>(v.bits)) : static_cast<double>(v.bits);
  return true;
}

bool MsgpackReader::read_length(size_t width, uint32_t& n) {
  if (!need(1 + width)) return false;
  n = static_cast<uint32_t>(load_be(p_ + 1, width));
  p_ += 1 + width;
  if (n > limits_.max_length) return fail(MsgpackError::kTooLarge);
  return true;
}

bool MsgpackReader::read_str(std::string_view& out) {
  if (!need(1)) return false;
  const uint8_t b = *p_;
  uint32_t n = 0;
  if (b >= 0xa0 && b <= 0xbf) {
    n = b & 0x1fu;
    ++p_;
  } else if (b == 0xd9 || b == 0xda || b == 0xdb) {
    if (!read_length(size_t{1} << (b - 0xd9), n)) return false;
  } else {
    return fail(b == 0xc1 ? MsgpackError::kInvalidByte : MsgpackError::kWrongType);
  }
  if (!need(n)) return false;
  out = std::string_view(reinterpret_cast<const char*>(p_), n);
  p_ += n;
  return true;
}

bool MsgpackReader::read_bin(std::span<const uint8_t>& out) {
  if (!need(1)) return false;
  const uint8_t b = *p_;
  if (b < 0xc4 || b > 0xc6) return fail(b == 0xc1 ? MsgpackError::kInvalidByte : MsgpackError::kWrongType);
  uint32_t n = 0;
  if (!read_length(size_t{1} << (b - 0xc4), n)) return false;
  if (!need(n)) return false;
  out = std::span<const uint8_t>(p_, n);
  p_ += n;
  return true;
}

bool MsgpackReader::read_array(uint32_t& n) {
  if (!need(1)) return false;
  const uint8_t b = *p_;
  if (b >= 0x90 && b <= 0x9f) {
    n = b & 0x0fu;
    ++p_;
  } else if (b == 0xdc || b == 0xdd) {
    if (!read_length(b == 0xdc ? 2 : 4, n)) return false;
  } else {
    return fail(b == 0xc1 ? MsgpackError::kInvalidByte : MsgpackError::kWrongType);
  }
  // Every element takes at least one byte: a count beyond the bytes left is a lie.
  if (n > remaining()) return fail(MsgpackError::kTruncated);
  return true;
}

bool MsgpackReader::read_map(uint32_t& n) {
  if (!need(1)) return false;
  const uint8_t b = *p_;
  if (b >= 0x80 && b <= 0x8f) {
    n = b & 0x0fu;
    ++p_;
  } else if (b == 0xde || b == 0xdf) {
    if (!read_length(b == 0xde ? 2 : 4, n)) return false;
  } else {
    return fail(b == 0xc1 ? MsgpackError::kInvalidByte : MsgpackError::kWrongType);
  }
  if (uint64_t{n} * 2 > remaining()) return fail(MsgpackError::kTruncated);
  return true;
}

bool MsgpackReader::read_header(uint64_t& elements, size_t& payload) {
  elements = 0;
  payload = 0;
  if (!need(1)) return false;
  const uint8_t b = *p_;
  uint32_t n = 0;
  if (b < 0x80 || b >= 0xe0) {
    ++p_;
    return true;
  }
  if (b < 0x90) {
    elements = uint64_t{b & 0x0fu} * 2;
    ++p_;
    return true;
  }
  if (b < 0xa0) {
    elements = b & 0x0fu;
    ++p_;
    return true;
  }
  if (b < 0xc0) {
    payload = b & 0x1fu;
    ++p_;
    return true;
  }
  switch (b) {
    case 0xc0:
    case 0xc2:
    case 0xc3: ++p_; return true;
    case 0xc1: return fail(MsgpackError::kInvalidByte);
    case 0xc4:
    case 0xc5:
    case 0xc6:
      if (!read_length(size_t{1} << (b - 0xc4), n)) return false;
      payload = n;
      return true;
    case 0xc7:
    case 0xc8:
    case 0xc9:
      if (!read_length(size_t{1} << (b - 0xc7), n)) return false;
      payload = size_t{n} + 1;  // the ext type byte, then the data
      return true;
    case 0xca: payload = 4; ++p_; return true;
    case 0xcb: payload = 8; ++p_; return true;
    case 0xcc: payload = 1; ++p_; return true;
    case 0xcd: payload = 2; ++p_; return true;
    case 0xce: payload = 4; ++p_; return true;
    case 0xcf: payload = 8; ++p_; return true;
    case 0xd0: payload = 1; ++p_; return true;
    case 0xd1: payload = 2; ++p_; return true;
    case 0xd2: payload = 4; ++p_; return true;
    case 0xd3: payload = 8; ++p_; return true;
    case 0xd4: payload = 2; ++p_; return true;  // fixext: type byte + 1/2/4/8/16 bytes
    case 0xd5: payload = 3; ++p_; return true;
    case 0xd6: payload = 5; ++p_; return true;
    case 0xd7: payload = 9; ++p_; return true;
    case 0xd8: payload = 17; ++p_; return true;
    case 0xd9:
    case 0xda:
    case 0xdb:
      if (!read_length(size_t{1} << (b - 0xd9), n)) return false;
      payload = n;
      return true;
    case 0xdc:
    case 0xdd:
      if (!read_length(b == 0xdc ? 2 : 4, n)) return false;
      elements = n;
      return true;
    case 0xde:
    case 0xdf:
      if (!read_length(b == 0xde ? 2 : 4, n)) return false;
      elements = uint64_t{n} * 2;
      return true;
    default: return fail(MsgpackError::kInvalidByte);
  }
}

bool MsgpackReader::skip() {
  // An explicit stack of "values still to skip" per open container: no recursion, so hostile
  // nesting costs a bounded array, and the depth limit turns it into an error.
  constexpr uint32_t kMaxStack = 64;
  uint64_t pending[kMaxStack];
  const uint32_t max_depth = limits_.max_depth < kMaxStack ? limits_.max_depth : kMaxStack - 1;
  uint32_t depth = 0;
  pending[0] = 1;
  while (true) {
    if (pending[depth] == 0) {
      if (depth == 0) return true;
      --depth;
      continue;
    }
    --pending[depth];
    uint64_t elements = 0;
    size_t payload = 0;
    if (!read_header(elements, payload)) return false;
    if (!need(payload)) return false;
    p_ += payload;
    if (elements > 0) {
      if (elements > remaining()) return fail(MsgpackError::kTruncated);
      if (depth + 1 > max_depth) return fail(MsgpackError::kTooDeep);
      pending[++depth] = elements;
    }
  }
}

void MsgpackWriter::be(uint8_t tag, uint64_t v, size_t width) {
  char buf[9];
  buf[0] = static_cast<char>(tag);
  for (size_t i = 0; i < width; ++i) {
    buf[width - i] = static_cast<char>(static_cast<uint8_t>(v >> (8 * i)));
  }
  out_.append(buf, width + 1);
}

void MsgpackWriter::uint(uint64_t v) {
  if (v < 0x80) {
    byte(static_cast<uint8_t>(v));
  } else if (v <= 0xff) {
    be(0xcc, v, 1);
  } else if (v <= 0xffff) {
    be(0xcd, v, 2);
  } else if (v <= 0xffffffffu) {
    be(0xce, v, 4);
  } else {
    be(0xcf, v, 8);
  }
}

void MsgpackWriter::sint(int64_t v) {
  if (v >= 0) {
    uint(static_cast<uint64_t>(v));
  } else if (v >= -32) {
    byte(static_cast<uint8_t>(static_cast<int8_t>(v)));
  } else if (v >= INT8_MIN) {
    be(0xd0, static_cast<uint64_t>(v), 1);
  } else if (v >= INT16_MIN) {
    be(0xd1, static_cast<uint64_t>(v), 2);
  } else if (v >= INT32_MIN) {
    be(0xd2, static_cast<uint64_t>(v), 4);
  } else {
    be(0xd3, static_cast<uint64_t>(v), 8);
  }
}

void MsgpackWriter::float64(double v) { be(0xcb, std::bit_cast<uint64_t>(v), 8); }

void MsgpackWriter::str(std::string_view s) {
  const size_t n = s.size();
  if (n < 32) {
    byte(static_cast<uint8_t>(0xa0 | n));
  } else if (n <= 0xff) {
    be(0xd9, n, 1);
  } else if (n <= 0xffff) {
    be(0xda, n, 2);
  } else {
    be(0xdb, n, 4);
  }
  out_.append(s);
}

void MsgpackWriter::bin(std::span<const uint8_t> b) {
  const size_t n = b.size();
  if (n <= 0xff) {
    be(0xc4, n, 1);
  } else if (n <= 0xffff) {
    be(0xc5, n, 2);
  } else {
    be(0xc6, n, 4);
  }
  raw(b);
}

void MsgpackWriter::array(uint32_t n) {
  if (n < 16) {
    byte(static_cast<uint8_t>(0x90 | n));
  } else if (n <= 0xffff) {
    be(0xdc, n, 2);
  } else {
    be(0xdd, n, 4);
  }
}

void MsgpackWriter::map(uint32_t n) {
  if (n < 16) {
    byte(static_cast<uint8_t>(0x80 | n));
  } else if (n <= 0xffff) {
    be(0xde, n, 2);
  } else {
    be(0xdf, n, 4);
  }
}

}  // namespace infera::events
