// Names of the filters, tests and global functions the interpreter provides (internal to the
// jinja module). The parser resolves names to these ids once; the interpreter dispatches on them.
// Unknown names resolve to kUnknown and fail when evaluated, as jinja2 fails at render time.
#pragma once

#include <cstdint>
#include <string_view>

namespace infera::jinja {

enum class FilterId : uint8_t {
  kUnknown,
  kAbs,
  kAttr,
  kBatch,
  kCapitalize,
  kCenter,
  kCount,
  kDefault,
  kDictsort,
  kEscape,
  kFirst,
  kFloat,
  kFormat,
  kGroupby,
  kIndent,
  kInt,
  kItems,
  kJoin,
  kLast,
  kLength,
  kList,
  kLower,
  kMap,
  kMax,
  kMin,
  kReject,
  kRejectattr,
  kReplace,
  kReverse,
  kRound,
  kSafe,
  kSelect,
  kSelectattr,
  kSort,
  kString,
  kSum,
  kTitle,
  kTojson,
  kTrim,
  kUnique,
  kUpper,
  kWordcount,
  kNumIds,  // not a filter: the number of ids (filters.cc's table has one entry per id)
};

enum class TestId : uint8_t {
  kUnknown,
  kBoolean,
  kCallable,
  kDefined,
  kDivisibleby,
  kEq,
  kEscaped,
  kEven,
  kFalse,
  kFilter,
  kFloat,
  kGe,
  kGt,
  kIn,
  kInteger,
  kIterable,
  kLe,
  kLower,
  kLt,
  kMapping,
  kNe,
  kNone,
  kNumber,
  kOdd,
  kSameas,
  kSequence,
  kString,
  kTest,
  kTrue,
  kUndefined,
  kUpper,
};

enum class FunctionId : uint8_t { kRange, kNamespace, kDict, kRaiseException, kStrftimeNow };

FilterId find_filter(std::string_view name);
TestId find_test(std::string_view name);

// What an attribute name means on each type, computed once per `.name` in the parser so
// attribute access does not search method tables at render time.
enum AttributeFlags : uint8_t {
  kAttrStrMethod = 1 << 0,
  kAttrDictMethod = 1 << 1,
  kAttrDictUnsafe = 1 << 2,
  kAttrListMethod = 1 << 3,
  kAttrListUnsafe = 1 << 4,
  kAttrLoopMethod = 1 << 5,
  kAttrPrivate = 1 << 6,  // starts with '_': hidden by the sandbox
};
uint8_t attribute_flags(std::string_view name);

}  // namespace infera::jinja
