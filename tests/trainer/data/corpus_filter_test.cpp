// corpus_filter.h: which file names are read as text, which texts are kept (each drop reason on a
// crafted input, at the rules' exact boundaries), the UTF-8 repair and the cutting of long texts.
#include <string>
#include <vector>

#include "catch.h"
#include "mxablate/data/corpus_filter.h"

using namespace mxablate::data;

namespace {

// Ordinary lines of prose, `lines` of them (each 60 bytes with its '\n').
std::string prose(size_t lines) {
  std::string s;
  for (size_t i = 0; i < lines; ++i) s += "The quick brown fox jumps over the lazy dog once more, again\n";
  return s;
}

// `text` padded with prose-like words to exactly `size` bytes (lines under 80 bytes).
std::string padded(std::string text, size_t size) {
  const std::string word = "lorem ";
  size_t column = 0;
  while (text.size() < size) {
    if (column >= 60 || text.size() + 1 == size) {
      text += '\n';
      column = 0;
    } else {
      text += word.substr(0, std::min(word.size(), size - text.size() - 1));
      column += word.size();
    }
  }
  REQUIRE(text.size() == size);
  return text;
}

std::string describe(const std::optional<DropReason>& r) {
  return r ? drop_reason_name(*r) : "keep";
}

bool valid_utf8_start(const std::string& piece) {
  return piece.empty() || (static_cast<unsigned char>(piece[0]) & 0xC0) != 0x80;
}

}  // namespace

TEST_CASE("is_text_file_name: source, build files and prose by extension or name, .gz/.dz looked through", "[data][collect]") {
  for (const char* name :
       {"main.c", "x.h", "Foo.C", "lib.cpp", "a.hpp", "mod.rs", "main.go", "run.py", "t.S", "k.dts",
        "Makefile", "GNUmakefile", "Kconfig", "README", "ChangeLog", "changelog", "AUTHORS",
        "CMakeLists.txt", "configure.ac", "notes.md", "guide.rst", "doc.rst.txt", "man.texi",
        "gcide.dict.dz", "x.c.gz", "README.gz", "ChangeLog.dz", "build.mk", "Makefile.am"}) {
    INFO(name);
    CHECK(is_text_file_name(name));
  }
  for (const char* name :
       {"index.html", "page.htm", "logo.png", "photo.jpg", "lib.so", "x.o", "archive.tar.gz",
        "x.png.gz", "data.bin", "LICENSE", "COPYING", "data", "run", "x.gz", "x.dz", ".c", "foo.",
        "a.CPP", "Makefile.in", "README.html", "x.c.bz2", "x.c.xz", "x.tgz", ""}) {
    INFO(name);
    CHECK_FALSE(is_text_file_name(name));
  }
  CHECK(is_compressed_file_name("a.gz"));
  CHECK(is_compressed_file_name("gcide.dict.dz"));
  CHECK_FALSE(is_compressed_file_name("a.tgz"));
  CHECK_FALSE(is_compressed_file_name("a.bz2"));
  CHECK_FALSE(is_compressed_file_name("a.c"));
}

TEST_CASE("classify_text keeps ordinary C code and prose", "[data][collect]") {
  const std::string c_code =
      "/* SPDX-License-Identifier: GPL-2.0 */\n"
      "#include <stdio.h>\n"
      "#define MAX 16\n\n"
      "static int add(int a, int b) {\n"
      "\treturn a + b;\t/* tabs, \r\n line ends and a form feed \f are fine */\n"
      "}\n\n"
      "int main(void) {\n"
      "  unsigned mask = 0xff;\n"
      "  printf(\"%d\\n\", add(1, 2) & mask);\n"
      "  return 0;\n"
      "}\n";
  CHECK(describe(classify_text(c_code)) == "keep");
  CHECK(describe(classify_text(prose(200))) == "keep");  // 12,000 bytes, 60 per line
  CHECK(describe(classify_text("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 na\xC3\xAFve\n")) == "keep");
  CHECK(describe(classify_text("x")) == "keep");
}

TEST_CASE("classify_text: empty and binary, with the 1-in-1000 boundary", "[data][collect]") {
  CHECK(describe(classify_text("")) == "empty");
  CHECK(describe(classify_text(" \n\t\r\n\f\v  ")) == "empty");
  CHECK(describe(classify_text(std::string("int x;\0int y;\n", 14))) == "binary");
  CHECK(describe(classify_text(std::string(1, '\0'))) == "binary");

  // One odd byte in 1000 is kept (a stray Windows-1252 quote), one in 999 is not.
  for (const std::string odd : {"\x01", "\x1B", "\x7F", "\xFF", "\x93", "\xC3"}) {
    INFO("odd byte " << static_cast<int>(static_cast<unsigned char>(odd[0])));
    const std::string base = prose(20);  // 1,200 bytes
    CHECK(describe(classify_text(odd + base.substr(0, 999))) == "keep");
    CHECK(describe(classify_text(odd + base.substr(0, 998))) == "binary");
    CHECK(describe(classify_text(odd + odd + base.substr(0, 998))) == "binary");  // 2 in 1000
  }
  // Each byte of an invalid sequence counts: an overlong '/' (2), a surrogate (3), a code point
  // above U+10FFFF (4), a lone continuation byte (1).
  const std::string base = prose(100);
  for (const auto& [bad, bytes] : std::vector<std::pair<std::string, size_t>>{
           {"\xC0\xAF", 2}, {"\xED\xA0\x80", 3}, {"\xF4\x90\x80\x80", 4}, {"\x80", 1}}) {
    INFO("bad sequence of " << bytes);
    CHECK(describe(classify_text(bad + base.substr(0, 1000 * bytes - bad.size()))) == "keep");
    CHECK(describe(classify_text(bad + base.substr(0, 1000 * bytes - bad.size() - 1))) == "binary");
  }
  // Tab, line feed, carriage return, form feed and vertical tab are not odd.
  CHECK(describe(classify_text(std::string(400, '\t') + std::string(400, '\r') +
                               std::string(100, '\f') + std::string(100, '\v') + "a\n")) == "keep");
}

TEST_CASE("classify_text: minified at a 5,001-byte line or 200+ bytes per line past 2 KB", "[data][collect]") {
  // A 5,000-byte line among ordinary ones is kept; 5,001 is minified.
  const std::string line5000(5000, 'a');
  CHECK(describe(classify_text(prose(100) + line5000 + "\n" + prose(100))) == "keep");
  CHECK(describe(classify_text(prose(100) + line5000 + "a\n" + prose(100))) == "minified");
  CHECK(describe(classify_text(prose(100) + line5000 + "a")) == "minified");  // last line, no '\n'
  // Average line length: 2,048 bytes on one line are kept, 2,049 are not.
  std::string words;
  while (words.size() < 2049) words += "word ";
  CHECK(describe(classify_text(words.substr(0, 2048))) == "keep");
  CHECK(describe(classify_text(words.substr(0, 2049))) == "minified");
  // 4,000 bytes in exactly 20 lines (200 per line) are kept; one byte more is minified.
  std::string lines;
  for (int i = 0; i < 20; ++i) lines += words.substr(0, 199) + "\n";
  REQUIRE(lines.size() == 4000);
  CHECK(describe(classify_text(lines)) == "keep");
  CHECK(describe(classify_text("w" + lines)) == "minified");
}

TEST_CASE("classify_text: generated when its first 2 KB say so", "[data][collect]") {
  for (const std::string mark :
       {"Generated by", "AUTOMATICALLY GENERATED", "autogenerated", "Auto-Generated", "DO NOT EDIT",
        "generated automatically", "machine generated", "Machine-generated",
        "This file is generated", "this file was generated", "@generated"}) {
    INFO(mark);
    CHECK(describe(classify_text("/* " + mark + " */\nint x;\n")) == "generated");
    // The mark ending at byte 2,048 is in the head; one byte later it is not.
    const std::string head = padded("", 2048 - mark.size());
    CHECK(describe(classify_text(head + mark + "\n" + prose(5))) == "generated");
    CHECK(describe(classify_text(head + " " + mark + "\n" + prose(5))) == "keep");
  }
  CHECK(describe(classify_text("/* generated code follows, by hand */\n")) == "keep");
}

TEST_CASE("classify_text: data tables past 4 KB (hex density, letters, #define maps)", "[data][collect]") {
  // Hex literals: one per 24 bytes is a table; one per 24 bytes and a byte is not.
  std::string hex;
  for (int i = 0; i < 200; ++i) hex += "value 0xab in table xyz\n";  // 24 bytes, 1 literal
  REQUIRE(hex.size() == 4800);
  CHECK(describe(classify_text(hex)) == "data_table");
  CHECK(describe(classify_text(hex + "z")) == "keep");
  std::string not_hex;  // "0x" not followed by a hex digit is no literal
  for (int i = 0; i < 200; ++i) not_hex += "value 0xg_ in table xyz\n";
  CHECK(describe(classify_text(not_hex)) == "keep");

  // Letters under a quarter of the visible bytes: 3 of 12 is a quarter (kept), 3 of 13 is not.
  std::string numbers;
  for (int i = 0; i < 300; ++i) numbers += "abc 123456789\n";
  REQUIRE(numbers.size() == 4200);
  CHECK(describe(classify_text(numbers)) == "keep");
  CHECK(describe(classify_text(numbers + "1")) == "data_table");
  // Non-ASCII bytes count as letters (text in other scripts).
  std::string greek;
  for (int i = 0; i < 400; ++i) greek += "\xCE\xB1 1234567\n";  // 2 "letters" of 9 visible
  CHECK(describe(classify_text(greek)) == "data_table");
  greek.clear();
  for (int i = 0; i < 300; ++i) greek += "\xCE\xB1\xCE\xB2 12345678\n";  // 4 of 12
  CHECK(describe(classify_text(greek)) == "keep");

  // At most 4,096 bytes is never a table.
  std::string small;
  while (small.size() < 4096) small += "0x00, ";
  small.resize(4096);
  for (size_t i = 59; i < small.size(); i += 60) small[i] = '\n';
  CHECK(describe(classify_text(small)) == "keep");
  CHECK(describe(classify_text(small + "0")) == "data_table");

  // #define maps: nine lines in ten of at least 200 non-blank lines.
  const auto header = [](int defines, int others, int blanks) {
    std::string s;
    for (int i = 0; i < others; ++i) s += "/* a register of the block, see the manual */\n";
    for (int i = 0; i < defines; ++i)
      s += (i % 2 ? "#define REGISTER_NAME_" : "  \t#define REGISTER_NAME_") + std::to_string(1000 + i) +
           " " + std::to_string(i * 4) + "\n";
    s += std::string(static_cast<size_t>(blanks), '\n');
    return s;
  };
  CHECK(describe(classify_text(header(180, 20, 50))) == "data_table");  // blank lines not counted
  CHECK(describe(classify_text(header(179, 21, 0))) == "keep");
  CHECK(describe(classify_text(header(199, 0, 0))) == "keep");  // fewer than 200 lines
  CHECK(describe(classify_text(header(200, 0, 0))) == "data_table");
}

TEST_CASE("classify_text applies its rules in order: empty, binary, minified, generated, data", "[data][collect]") {
  std::string table;
  for (int i = 0; i < 400; ++i) table += "0x01, 0x02,\n";
  CHECK(describe(classify_text(table)) == "data_table");
  CHECK(describe(classify_text("/* generated by gen.py */\n" + table)) == "generated");
  CHECK(describe(classify_text("/* generated by gen.py */\n" + table + std::string(6000, 'x'))) ==
        "minified");
  CHECK(describe(classify_text(std::string(1, '\0') + "/* generated by gen.py */\n" +
                               std::string(6000, 'x'))) == "binary");
}

TEST_CASE("drop_reason_name names every reason once", "[data][collect]") {
  std::vector<std::string> names;
  for (DropReason r : kAllDropReasons) names.push_back(drop_reason_name(r));
  CHECK(names == std::vector<std::string>{"not_text", "empty", "too_large", "binary", "minified",
                                          "generated", "data_table", "duplicate", "unreadable",
                                          "special", "damaged"});
}

TEST_CASE("repair_utf8 replaces each invalid byte with U+FFFD and leaves valid text alone", "[data][collect]") {
  const std::string fffd = "\xEF\xBF\xBD";
  for (const std::string& valid : std::vector<std::string>{std::string(), std::string("plain ASCII\n"), std::string("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
        std::string("\xF4\x8F\xBF\xBF"), std::string("a\0b", 3)}) {
    std::string s = valid;
    repair_utf8(s);
    CHECK(s == valid);
  }
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ab\xFF" "cd", "ab" + fffd + "cd"},
      {"\x93quoted\x94", fffd + "quoted" + fffd},
      {"end\xC3", "end" + fffd},                                // cut 2-byte sequence
      {"\xE2\x82", fffd + fffd},                                // cut 3-byte sequence
      {"\xC0\xAF", fffd + fffd},                                // overlong '/'
      {"\xED\xA0\x80" "x", fffd + fffd + fffd + "x"},           // surrogate
      {"\xF4\x90\x80\x80", fffd + fffd + fffd + fffd},          // above U+10FFFF
      {"\xC3\xA9\x80\xC3\xA9", "\xC3\xA9" + fffd + "\xC3\xA9"}, // stray continuation byte
      {"\xE2\x82\xAC\xE2(", "\xE2\x82\xAC" + fffd + "("},
  };
  for (const auto& [in, expected] : cases) {
    std::string s = in;
    repair_utf8(s);
    CHECK(s == expected);
  }
}

TEST_CASE("split_into_documents: up to 1 MiB is one document", "[data][collect]") {
  const std::string exactly(TextLimits{}.max_document_bytes, 'a');
  const auto one = split_into_documents(exactly, TextLimits{});
  REQUIRE(one.size() == 1);
  CHECK(one[0] == exactly);
  CHECK(split_into_documents("short", TextLimits{}) == std::vector<std::string>{"short"});
  CHECK(split_into_documents("", TextLimits{}) == std::vector<std::string>{""});
}

TEST_CASE("split_into_documents: longer texts are cut into pieces of at most 256 KiB at blank lines", "[data][collect]") {
  // Paragraphs of varying length separated by blank lines.
  std::string text;
  for (int i = 0; text.size() <= TextLimits{}.max_document_bytes + 1000; ++i)
    text += prose(static_cast<size_t>(1 + (i * 7) % 23)) + "\n";
  const auto pieces = split_into_documents(text, TextLimits{});
  REQUIRE(pieces.size() >= 5);
  std::string joined;
  size_t pos = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    INFO("piece " << i << " of " << pieces.size() << ", " << pieces[i].size() << " bytes");
    CHECK(pieces[i].size() <= TextLimits{}.document_chunk_bytes());
    CHECK_FALSE(pieces[i].empty());
    if (i + 1 < pieces.size()) {
      // Cut after a blank line, and at the last one that fits.
      CHECK(pieces[i].size() >= 2);
      CHECK(pieces[i].substr(pieces[i].size() - 2) == "\n\n");
      const size_t next_blank = text.find("\n\n", pos + pieces[i].size() - 1);
      REQUIRE(next_blank != std::string::npos);
      CHECK(next_blank + 2 > pos + TextLimits{}.document_chunk_bytes());
    }
    joined += pieces[i];
    pos += pieces[i].size();
  }
  CHECK(joined == text);
}

TEST_CASE("split_into_documents: without blank lines at line breaks, without those at UTF-8 boundaries", "[data][collect]") {
  // Lines but no blank line: every piece but the last ends with '\n'.
  std::string lines = prose(TextLimits{}.max_document_bytes / 60 + 10);
  auto pieces = split_into_documents(lines, TextLimits{});
  REQUIRE(pieces.size() == 5);
  std::string joined;
  for (size_t i = 0; i < pieces.size(); ++i) {
    CHECK(pieces[i].size() <= TextLimits{}.document_chunk_bytes());
    if (i + 1 < pieces.size()) {
      CHECK(pieces[i].back() == '\n');
      CHECK(pieces[i].size() > TextLimits{}.document_chunk_bytes() - 60);  // the last line break that fits
    }
    joined += pieces[i];
  }
  CHECK(joined == lines);

  // No line break at all: 2-, 3- and 4-byte characters, offset so the limit falls inside one.
  for (const std::string ch : {"\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80"}) {
    for (size_t offset = 0; offset < ch.size(); ++offset) {
      INFO(ch.size() << "-byte characters, offset " << offset);
      std::string text(offset, 'a');
      while (text.size() <= TextLimits{}.max_document_bytes + 10) text += ch;
      pieces = split_into_documents(text, TextLimits{});
      REQUIRE(pieces.size() == 5);
      joined.clear();
      for (size_t i = 0; i < pieces.size(); ++i) {
        CHECK(pieces[i].size() <= TextLimits{}.document_chunk_bytes());
        // Cut at the last character boundary that fits.
        if (i + 1 < pieces.size()) CHECK(pieces[i].size() + ch.size() > TextLimits{}.document_chunk_bytes());
        CHECK(valid_utf8_start(pieces[i]));
        std::string repaired = pieces[i];
        repair_utf8(repaired);
        CHECK(repaired == pieces[i]);  // each piece is whole characters
        joined += pieces[i];
      }
      CHECK(joined == text);
    }
  }
}
