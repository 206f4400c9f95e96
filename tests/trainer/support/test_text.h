// English-like text that the tests write for themselves: sentences from a small grammar, so a
// tokenizer has words to learn and a small model has structure to pick up (design rule: tests never
// need the default corpus).
#pragma once

#include <cstdint>
#include <string>

namespace mxablate::test {

// `documents` paragraphs of 3-8 sentences, separated by blank lines; a function of `seed`.
std::string make_test_corpus(int documents, uint64_t seed);
// Writes make_test_corpus to `path`; returns the number of documents.
int write_test_corpus(const std::string& path, int documents, uint64_t seed);

}  // namespace mxablate::test
