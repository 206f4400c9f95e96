// Which files of a source tree become training documents (`mxablate data collect`,
// docs/design.md §4 "The large corpus"). Pure functions of a file's name and bytes, so the rules
// are tested on their own and every drop is counted under one reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mxablate/data/input_file.h"

namespace mxablate::data {

// Why a file did not become a document. One name table (drop_reason_name) serves the stats
// files, the log lines and the docs.
enum class DropReason {
  kNotText,    // a name we do not read as text (images, archives, HTML, object files, …)
  kEmpty,      // nothing but whitespace
  kTooLarge,   // over kMaxCollectFileBytes
  kBinary,     // NUL bytes, or many control characters or bytes that are not UTF-8
  kMinified,   // machine-packed lines (minified JS/CSS, one-line data)
  kGenerated,  // says in its head that a program wrote it
  kDataTable,  // numbers, not language: hex tables, register maps, test vectors
  kDuplicate,  // the exact bytes of a file kept before (in any source)
  // What the one input reader (input_file.h) cannot read, as `data prepare` names it:
  kUnreadable,  // permission denied, an I/O error, a directory that cannot be listed
  kSpecial,     // a FIFO, socket or device, or a symbolic link (never followed)
  kDamaged,     // a .gz/.dz that fails its check (cut short, bad CRC) or is not compressed
};
inline constexpr DropReason kAllDropReasons[] = {
    DropReason::kNotText,   DropReason::kEmpty,      DropReason::kTooLarge,
    DropReason::kBinary,    DropReason::kMinified,   DropReason::kGenerated,
    DropReason::kDataTable, DropReason::kDuplicate,  DropReason::kUnreadable,
    DropReason::kSpecial,   DropReason::kDamaged};
const char* drop_reason_name(DropReason reason);
DropReason drop_reason_of(InputProblem problem);

// Files larger than this are not read at all. A kept text longer than
// TextLimits::max_document_bytes is cut by split_into_documents (input_file.h), so one
// dictionary or one ChangeLog is not one 40 MB "document".
inline constexpr int64_t kMaxCollectFileBytes = int64_t{64} << 20;

// Whether a file name is one we read as text: source code, build files and prose by extension
// or by well-known name (Makefile, README, ChangeLog, …). A trailing .gz/.dz (gzip, dictzip) is
// looked through: "gcide.dict.dz" is text that must be decompressed first.
bool is_text_file_name(std::string_view file_name);
// (is_compressed_file_name: input_file.h, the rule both data commands read by.)

// The content rules, in order: empty, binary, minified, generated, data table. nullopt: keep.
std::optional<DropReason> classify_text(std::string_view text);

// Replaces each byte that is not part of valid UTF-8 with U+FFFD (a kept text may hold a few;
// see classify_text's binary rule), so every document written is valid UTF-8.
void repair_utf8(std::string& text);


}  // namespace mxablate::data
