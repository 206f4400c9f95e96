// Hostile strings through every output format's one escaping function, and through the table
// writers that use them, against exact expected text.
#include <string>
#include <vector>

#include "arm_fixture.h"
#include "catch.h"
#include "mxablate/analysis/arm_table.h"
#include "mxablate/analysis/escape.h"

using namespace mxablate;
using mxablate::test::make_arm;

namespace {

struct Case {
  std::string input;
  std::string shown;     // visible() and terminal()
  std::string html;
  std::string markdown;
  std::string latex;
  std::string csv;
};

// Raw strings keep the expected text readable: R"(\x0a)" is the four characters \ x 0 a.
const std::vector<Case> kCases = {
    {"plain", "plain", "plain", "plain", "plain", "plain"},
    {"a\n!touch /tmp/x", R"(a\x0a!touch /tmp/x)", R"(a\x0a!touch /tmp/x)",
     R"(a\\x0a!touch /tmp/x)", R"(a\textbackslash{}x0a!touch /tmp/x)", R"(a\x0a!touch /tmp/x)"},
    {R"(system("id"))", R"(system("id"))", "system(&quot;id&quot;)", R"(system("id"))",
     R"(system("id"))", R"~("system(""id"")")~"},
    {"`id`", "`id`", "`id`", "`id`", "`id`", "`id`"},
    {"a|b", "a|b", "a|b", R"(a\|b)", R"(a\textbar{}b)", "a|b"},
    {R"(x\y)", R"(x\y)", R"(x\y)", R"(x\\y)", R"(x\textbackslash{}y)", R"(x\y)"},
    {"@{x}^_&~$#%", "@{x}^_&~$#%", "@{x}^_&amp;~$#%", R"(@{x}^_\&~$#%)",
     R"(@\{x\}\textasciicircum{}\_\&\textasciitilde{}\$\#\%)", "'@{x}^_&~$#%"},
    {"<img src=x onerror='f()'>", "<img src=x onerror='f()'>",
     "&lt;img src=x onerror=&#39;f()&#39;&gt;", R"(\<img src=x onerror='f()'\>)",
     R"(\textless{}img src=x onerror='f()'\textgreater{})", "<img src=x onerror='f()'>"},
    {"\x1b[31mred\x1b[0m", R"(\x1b[31mred\x1b[0m)", R"(\x1b[31mred\x1b[0m)",
     R"(\\x1b\[31mred\\x1b\[0m)", R"(\textbackslash{}x1b[31mred\textbackslash{}x1b[0m)",
     R"(\x1b[31mred\x1b[0m)"},
    {"tab\tcr\r\x7f", R"(tab\x09cr\x0d\x7f)", R"(tab\x09cr\x0d\x7f)", R"(tab\\x09cr\\x0d\\x7f)",
     R"(tab\textbackslash{}x09cr\textbackslash{}x0d\textbackslash{}x7f)",
     R"(tab\x09cr\x0d\x7f)"},
    // Not UTF-8: a stray byte, a truncated sequence, an overlong '/', a surrogate.
    {"bad\xff\xc3(\xc0\xaf\xed\xa0\x80", R"(bad\xff\xc3(\xc0\xaf\xed\xa0\x80)",
     R"(bad\xff\xc3(\xc0\xaf\xed\xa0\x80)", R"(bad\\xff\\xc3(\\xc0\\xaf\\xed\\xa0\\x80)",
     R"(bad\textbackslash{}xff\textbackslash{}xc3(\textbackslash{}xc0\textbackslash{}xaf\textbackslash{}xed\textbackslash{}xa0\textbackslash{}x80)",
     R"(bad\xff\xc3(\xc0\xaf\xed\xa0\x80)"},
    {"ünï—☺", "ünï—☺", "ünï—☺", "ünï—☺", "ünï—☺", "ünï—☺"},
    // C1 CSI (a terminal escape on its own), right-to-left override, line separator.
    {"\xc2\x9b" "2J\xe2\x80\xae" "evil\xe2\x80\xa8", R"(\u009b2J\u202eevil\u2028)",
     R"(\u009b2J\u202eevil\u2028)", R"(\\u009b2J\\u202eevil\\u2028)",
     R"(\textbackslash{}u009b2J\textbackslash{}u202eevil\textbackslash{}u2028)",
     R"(\u009b2J\u202eevil\u2028)"},
    // Not allowed in XML, so they would break an SVG figure.
    {"a\xef\xbf\xbe" "b\xef\xbf\xbf", R"(a\ufffeb\uffff)", R"(a\ufffeb\uffff)",
     R"(a\\ufffeb\\uffff)", R"(a\textbackslash{}ufffeb\textbackslash{}uffff)",
     R"(a\ufffeb\uffff)"},
    {"[x](javascript:f)", "[x](javascript:f)", "[x](javascript:f)", R"(\[x\](javascript:f))",
     "{}[x](javascript:f)", "[x](javascript:f)"},
    {"*star", "*star", "*star", "*star", "{}*star", "*star"},
    {"=1+2", "=1+2", "=1+2", "=1+2", "=1+2", "'=1+2"},
    {"-x,y", "-x,y", "-x,y", "-x,y", "-x,y", R"("'-x,y")"},
    {"-1.5", "-1.5", "-1.5", "-1.5", "-1.5", "-1.5"},
    {"+2e3", "+2e3", "+2e3", "+2e3", "+2e3", "+2e3"},
    {"-", "-", "-", "-", "-", "-"},  // one character cannot be a formula
    {"-=1", "-=1", "-=1", "-=1", "-=1", "'-=1"},
    {"", "", "", "", "", ""},
};

}  // namespace

TEST_CASE("every hostile string comes out of every format's escaping function as text") {
  for (const Case& c : kCases) {
    INFO("input: " << escape::visible(c.input));
    CHECK(escape::visible(c.input) == c.shown);
    CHECK(escape::terminal(c.input) == c.shown);
    CHECK(escape::html(c.input) == c.html);
    CHECK(escape::markdown_cell(c.input) == c.markdown);
    CHECK(escape::latex(c.input) == c.latex);
    CHECK(escape::csv_field(c.input) == c.csv);
    // Nothing but letters, digits and octal escapes reaches a gnuplot data file.
    const std::string gp = escape::gnuplot_datafile_text(c.input);
    for (size_t i = 0; i < gp.size(); ++i) {
      const char ch = gp[i];
      const bool alnum = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
      if (alnum) continue;
      REQUIRE(ch == '\\');
      REQUIRE(i + 4 < gp.size());
      CHECK(gp[i + 1] == '0');
      for (int k = 2; k <= 4; ++k) CHECK((gp[i + k] >= '0' && gp[i + k] <= '7'));
      i += 4;
    }
    // visible() is its own fixed point: escaping what is shown again changes nothing.
    CHECK(escape::visible(c.shown) == c.shown);
  }
  CHECK(escape::gnuplot_datafile_text("a b\"\n") == R"(a\0040b\0042\0134x0a)");
  CHECK(escape::gnuplot_datafile_text("ü") == R"(\0303\0274)");
  CHECK(escape::gnuplot_datafile_text("x\xff") == R"(x\0134xff)");
  // A digit after an escaped byte stays a digit (the model name of every preset).
  CHECK(escape::gnuplot_datafile_text("llama-20m") == R"(llama\005520m)");
}

TEST_CASE("clipping counts code points and never splits one") {
  CHECK(escape::clip("abcdef", 6) == "abcdef");
  CHECK(escape::clip("abcdefg", 6) == "abcde…");
  CHECK(escape::clip("ääääää", 3) == "ää…");
  CHECK(escape::clip("abc", 0) == "");
  CHECK(escape::clip(std::string(5000, 'L'), 60) == std::string(59, 'L') + "…");
}

TEST_CASE("a hostile arm name stays one cell of one row in every table format") {
  using namespace mxablate::analysis;
  ArmSummary a = make_arm("a|b\n\\input{/etc/passwd}", "mxfp4", "mxfp4", "mxfp4", "", "none");
  a.seeds = 1;
  a.diverged = 1;
  a.first_divergence_reason = "=cmd|' /C calc'!A0";
  a.cost.median_pct = 12.5;
  const std::vector<ArmSummary> arms = {a};
  const std::string caption = "Sweep <b>&_%";

  CHECK(render_table(arms, TableFormat::kMarkdown, caption) ==
        "Sweep \\<b\\>\\&_%. Extra tokens: each run against the median of the baseline runs (seeds "
        "do not match one to one), median over runs; interval: the range of those costs, which "
        "leaves out the baseline's own spread (not an interval for the median); no paired test. A "
        "figure marked ≥ rests on a run that never reached the target: it is only a lower bound "
        "(an interval's upper end so marked is open above).\n\n"
        "| arm | fprop | dgrad | wgrad | interventions | extra tokens | interval | p (sign-flip) | n "
        "| final val loss | seeds | reached | diverged | not reached | paper |\n"
        "|---|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        "| a\\|b\\\\x0a\\\\input{/etc/passwd} | mxfp4 | mxfp4 | mxfp4 | - | +12.5 % | - | n/a | 0 | - "
        "| 1 | 0 | 1 (=cmd\\|' /C calc'!A0) | 0 | +26-27 % |\n");

  const std::string tex = render_table(arms, TableFormat::kLatex, caption);
  CHECK(tex.find("\\caption{Sweep \\textless{}b\\textgreater{}\\&\\_\\%. Extra tokens") !=
        std::string::npos);
  CHECK(tex.find("\na\\textbar{}b\\textbackslash{}x0a\\textbackslash{}input\\{/etc/passwd\\} & "
                 "mxfp4 & mxfp4 & mxfp4 & - & +12.5 \\% & - & n/a & 0 & - & 1 & 0 & 1 (=cmd\\textbar{}' /C "
                 "calc'!A0) & 0 & +26-27 \\% \\\\\n") != std::string::npos);
  CHECK(tex.find("\\input{") == std::string::npos);

  const std::string csv = render_table(arms, TableFormat::kCsv, "");
  CHECK(csv.substr(csv.find('\n') + 1) ==
        "a|b\\x0a\\input{/etc/passwd},mxfp4,mxfp4,mxfp4,-,false,12.5,false,,,,,,,,,,0,,1,0,1,"
        "'=cmd|' /C calc'!A0,0,'+26-27 %,,\n");  // model and params: not set here

  CHECK(render_table(arms, TableFormat::kHtml, "") ==
        "<table>\n<tr><th>arm</th><th>fprop</th><th>dgrad</th><th>wgrad</th><th>interventions</th>"
        "<th>extra tokens</th><th>interval</th><th>p (sign-flip)</th><th>n</th><th>final val loss</th>"
        "<th>seeds</th><th>reached</th><th>diverged</th><th>not reached</th><th>paper</th></tr>\n"
        "<tr><td>a|b\\x0a\\input{/etc/passwd}</td><td>mxfp4</td><td>mxfp4</td><td>mxfp4</td>"
        "<td>-</td><td>+12.5 %</td><td>-</td><td>n/a</td><td>0</td><td>-</td><td>1</td><td>0</td>"
        "<td>1 (=cmd|&#39; /C calc&#39;!A0)</td><td>0</td><td>+26-27 %</td></tr>\n</table>\n");
}

namespace {

// Well-formed UTF-8 by the byte ranges of the Unicode standard (Table 3-7), written
// independently of the decoder in escape.cpp.
bool well_formed_utf8(const std::string& s) {
  const auto in = [](unsigned char c, int lo, int hi) { return c >= lo && c <= hi; };
  for (size_t i = 0; i < s.size();) {
    const auto b = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0; };
    const unsigned char c = b(0);
    size_t n = 0;
    if (c <= 0x7F) n = 1;
    else if (in(c, 0xC2, 0xDF) && in(b(1), 0x80, 0xBF)) n = 2;
    else if (c == 0xE0 && in(b(1), 0xA0, 0xBF) && in(b(2), 0x80, 0xBF)) n = 3;
    else if ((in(c, 0xE1, 0xEC) || in(c, 0xEE, 0xEF)) && in(b(1), 0x80, 0xBF) && in(b(2), 0x80, 0xBF)) n = 3;
    else if (c == 0xED && in(b(1), 0x80, 0x9F) && in(b(2), 0x80, 0xBF)) n = 3;
    else if (c == 0xF0 && in(b(1), 0x90, 0xBF) && in(b(2), 0x80, 0xBF) && in(b(3), 0x80, 0xBF)) n = 4;
    else if (in(c, 0xF1, 0xF3) && in(b(1), 0x80, 0xBF) && in(b(2), 0x80, 0xBF) && in(b(3), 0x80, 0xBF)) n = 4;
    else if (c == 0xF4 && in(b(1), 0x80, 0x8F) && in(b(2), 0x80, 0xBF) && in(b(3), 0x80, 0xBF)) n = 4;
    else return false;
    i += n;
  }
  return true;
}

// RFC 4180 reader for one record without line breaks.
std::vector<std::string> parse_csv_record(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') fields.back() += '"', ++i;
      else if (c == '"') quoted = false;
      else fields.back() += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

}  // namespace

// Random strings biased towards the dangerous bytes: whatever the input, each format's output
// holds no raw control byte, no invalid UTF-8, and no character its format would act on.
TEST_CASE("random bytes: every format's output is inert text") {
  const std::string alphabet = std::string("\x00\x01\x07\x08\t\n\r\x1b\x7f", 9) +
                               "\"'`\\|<>&[]{}$#%_^~*=+-@!,;: aZ09" +
                               "\xc2\x9b\xe2\x80\xae\xff\xc3\xed\xa0\xef\xbf\xbe";
  uint64_t state = 0x9E3779B97F4A7C15ull;
  const auto next = [&] {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return state;
  };
  for (int n = 0; n < 5000; ++n) {
    std::string s;
    const size_t length = next() % 24;
    for (size_t i = 0; i < length; ++i) s += alphabet[next() % alphabet.size()];
    INFO("input: " << escape::visible(s));

    const std::string shown = escape::visible(s);
    REQUIRE(well_formed_utf8(shown));
    for (unsigned char c : shown) REQUIRE((c >= 0x20 && c != 0x7F));
    REQUIRE(shown.find("\xc2\x9b") == std::string::npos);
    REQUIRE(shown.find("\xe2\x80\xae") == std::string::npos);
    REQUIRE(shown.find("\xef\xbf\xbe") == std::string::npos);

    const std::string html = escape::html(s);
    REQUIRE(html.find_first_of("<>\"'") == std::string::npos);

    // Markdown: every | < > & [ ] is preceded by an odd number of backslashes.
    const std::string md = escape::markdown_cell(s);
    for (size_t i = 0; i < md.size(); ++i) {
      if (std::string("|<>&[]").find(md[i]) == std::string::npos) continue;
      size_t slashes = 0;
      while (slashes < i && md[i - 1 - slashes] == '\\') ++slashes;
      REQUIRE(slashes % 2 == 1);
    }

    // LaTeX: a backslash only starts one of our commands; no bare special character.
    const std::string tex = escape::latex(s);
    for (size_t i = 0; i < tex.size(); ++i) {
      if (tex[i] == '\\') {
        bool known = false;
        for (const char* cmd : {"\\textbackslash{}", "\\textasciicircum{}", "\\textasciitilde{}",
                                "\\textless{}", "\\textgreater{}", "\\textbar{}", "\\{", "\\}",
                                "\\$", "\\&", "\\#", "\\%", "\\_"}) {
          if (tex.compare(i, std::string(cmd).size(), cmd) == 0) {
            i += std::string(cmd).size() - 1;
            known = true;
            break;
          }
        }
        REQUIRE(known);
      } else if (tex[i] == '{' && tex.compare(i, 2, "{}") == 0 && i == 0) {
        ++i;  // the guard before a leading [ or *
      } else {
        REQUIRE(std::string("{}$&#%_^~<>|").find(tex[i]) == std::string::npos);
      }
    }

    // CSV: one record with one field that reads back as the shown text (after the guard).
    const std::string csv = escape::csv_field(s);
    REQUIRE(csv.find_first_of("\r\n") == std::string::npos);
    const auto fields = parse_csv_record(csv);
    REQUIRE(fields.size() == 1);
    const bool guarded = fields[0].size() == shown.size() + 1 && fields[0][0] == '\'';
    CHECK(fields[0] == (guarded ? "'" + shown : shown));
    if (shown.size() > 1 && std::string("=+-@").find(shown[0]) != std::string::npos)
      CHECK((guarded || shown.find_first_not_of("+-.0123456789eE") == std::string::npos));
  }
}
