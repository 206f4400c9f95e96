// Untrusted text in our outputs. Names and strings read from recipes, event logs and databases
// (arm names, sweep names, axis values, event reasons, error notes) reach terminals, Markdown,
// LaTeX, CSV, HTML and gnuplot. Each output format has exactly one function here, and every
// writer of that format uses it, so data always stays text: it never becomes markup, a command,
// a terminal escape sequence, a new table row or a formula.
//
// All of them start from visible(): valid UTF-8 without control characters, in which whatever
// is not printable is shown as an escape (ESC as "\x1b", a stray byte 0xff as "\xff", U+202E as
// "\u202e"). A backslash in the data itself is kept as it is.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mxablate::escape {

// Printable form: invalid UTF-8 bytes, C0 controls (newline and tab included) and DEL become
// "\xHH"; C1 controls, line/paragraph separators, bidirectional overrides and the
// non-characters U+FFFE/U+FFFF (which XML, and so SVG, refuses) become "\uHHHH".
std::string visible(std::string_view s);

// A terminal (status, plan, query, progress, error lines): visible().
std::string terminal(std::string_view s);

// HTML text or a double- or single-quoted attribute value: & < > " ' as character references.
std::string html(std::string_view s);

// A Markdown (GFM) table cell: \ | < > & [ ] backslash-escaped, so the text can neither split the
// row nor become HTML, an entity, a link or an image. Emphasis characters (* _ `) only change
// the style and are left as they are, so names like loss_spike stay readable in the raw table.
std::string markdown_cell(std::string_view s);

// LaTeX text (a tabular cell or a caption): every special character as its text command
// (\textbackslash{}, \{, \}, \$, \&, \#, \%, \_, \textasciicircum{}, \textasciitilde{},
// \textless{}, \textgreater{}, \textbar{}); a leading [ or * is preceded by {} so that it is not
// read as an argument of the \\ that ends the previous row. Non-ASCII UTF-8 passes through.
std::string latex(std::string_view s);

// A CSV field (RFC 4180): quoted when it holds a comma, a double quote or a line break, with
// quotes doubled. Spreadsheet formula injection: a field of two or more characters that starts
// with = + - or @ and is not a plain decimal number ("-1.5", "+2e3" stay numbers) gets a leading
// apostrophe, which spreadsheets read as "this is text" (other readers see the apostrophe, e.g.
// "'+26-27 %"). Control characters are shown as visible() shows them, so a field never holds a
// line break and CSV on a terminal is as safe as any other output.
std::string csv_field(std::string_view s);

// One column of a tab-separated gnuplot data file, read back as a title with
// `title columnheader(N) noenhanced`: every byte other than [A-Za-z0-9] as an octal escape
// written \0ooo, which gnuplot decodes in data fields; nothing else in a data file is
// interpreted. (Not \ooo: after "\0" gnuplot takes three more digits, so "\055" before a digit
// would swallow it.)
std::string gnuplot_datafile_text(std::string_view s);

// At most `columns` code points of valid UTF-8 `s`, ending in "…" when cut.
std::string clip(std::string_view s, size_t columns);

}  // namespace mxablate::escape
