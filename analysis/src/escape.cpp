#include "mxablate/analysis/escape.h"

#include <fmt/format.h>

#include <cstdint>
#include <regex>
#include <vector>

namespace mxablate::escape {
namespace {

// Length of the well-formed UTF-8 sequence at s[i] (1-4) and its code point, or 0 when the byte
// there does not start one (stray continuation, overlong form, surrogate, beyond U+10FFFF,
// truncated).
size_t utf8_sequence(std::string_view s, size_t i, char32_t& cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  size_t n;
  char32_t min;
  if ((c & 0xE0) == 0xC0) {
    n = 2, cp = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, cp = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

// Code points a terminal, a browser or a text layout engine acts on instead of showing.
bool invisible(char32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) ||  // C0, DEL, C1
         cp == 0x200E || cp == 0x200F ||                              // LRM, RLM
         cp == 0x2028 || cp == 0x2029 ||                              // line/paragraph separator
         (cp >= 0x202A && cp <= 0x202E) ||                            // bidi embeddings/overrides
         (cp >= 0x2066 && cp <= 0x2069) ||                            // bidi isolates
         cp == 0xFFFE || cp == 0xFFFF;  // not characters: an SVG or XML holding them is broken
}

bool plain_number(std::string_view s) {
  static const std::regex number(R"([+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?)");
  return std::regex_match(s.begin(), s.end(), number);
}

}  // namespace

std::string visible(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const size_t n = utf8_sequence(s, i, cp);
    if (n == 0) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(s[i]));
      i += 1;
    } else if (invisible(cp)) {
      out += cp < 0x80 ? fmt::format("\\x{:02x}", static_cast<unsigned>(cp))
                       : fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
      i += n;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string terminal(std::string_view s) { return visible(s); }

std::string html(std::string_view s) {
  std::string out;
  for (char c : visible(s)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string markdown_cell(std::string_view s) {
  std::string out;
  for (char c : visible(s)) {
    switch (c) {
      case '\\': case '|': case '<': case '>': case '&': case '[': case ']':
        out += '\\';
        break;
      default: break;
    }
    out += c;
  }
  return out;
}

std::string latex(std::string_view s) {
  std::string out;
  for (char c : visible(s)) {
    switch (c) {
      case '\\': out += "\\textbackslash{}"; break;
      case '{': out += "\\{"; break;
      case '}': out += "\\}"; break;
      case '$': out += "\\$"; break;
      case '&': out += "\\&"; break;
      case '#': out += "\\#"; break;
      case '%': out += "\\%"; break;
      case '_': out += "\\_"; break;
      case '^': out += "\\textasciicircum{}"; break;
      case '~': out += "\\textasciitilde{}"; break;
      case '<': out += "\\textless{}"; break;
      case '>': out += "\\textgreater{}"; break;
      case '|': out += "\\textbar{}"; break;
      default: out += c;
    }
  }
  if (!out.empty() && (out[0] == '[' || out[0] == '*')) out.insert(0, "{}");
  return out;
}

std::string csv_field(std::string_view s) {
  std::string text = visible(s);
  if (text.size() > 1 && (text[0] == '=' || text[0] == '+' || text[0] == '-' || text[0] == '@') &&
      !plain_number(text))
    text.insert(0, "'");
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string gnuplot_datafile_text(std::string_view s) {
  std::string out;
  for (char c : visible(s)) {
    const auto byte = static_cast<unsigned char>(c);
    const bool alnum = (byte >= '0' && byte <= '9') || (byte >= 'A' && byte <= 'Z') ||
                       (byte >= 'a' && byte <= 'z');
    if (alnum) {
      out += c;
    } else {
      // "\0" and three octal digits: gnuplot reads up to three digits after a leading "\0", so
      // "\055" followed by "20m" would read as "\0552" (llama-20m shown as "llamaj0m").
      out += fmt::format("\\0{:03o}", static_cast<unsigned>(byte));
    }
  }
  return out;
}

std::string clip(std::string_view s, size_t columns) {
  if (columns == 0) return {};
  std::vector<size_t> starts;  // byte offset of each code point
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) starts.push_back(i);
  if (starts.size() <= columns) return std::string(s);
  return std::string(s.substr(0, starts[columns - 1])) + "…";
}

}  // namespace mxablate::escape
