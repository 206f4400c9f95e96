#include "test_text.h"

#include <array>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace mxablate::test {
namespace {

struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  template <size_t N>
  const char* pick(const std::array<const char*, N>& words) {
    return words[next() % N];
  }
};

constexpr std::array<const char*, 16> kNouns = {
    "farmer", "river", "king", "garden", "letter", "horse", "village", "sister",
    "window", "captain", "mountain", "teacher", "house", "stranger", "field", "ship"};
constexpr std::array<const char*, 12> kAdjectives = {
    "old", "quiet", "bright", "young", "small", "dark", "kind", "distant", "cold", "green",
    "proud", "gentle"};
constexpr std::array<const char*, 12> kVerbs = {
    "watched", "found", "carried", "remembered", "followed", "visited", "answered", "saw",
    "praised", "left", "built", "heard"};
constexpr std::array<const char*, 6> kPrepositions = {"near", "behind", "beyond", "under", "beside", "across"};
constexpr std::array<const char*, 5> kAdverbs = {"slowly", "early", "again", "at last", "in the evening"};

}  // namespace

std::string make_test_corpus(int documents, uint64_t seed) {
  Rng rng{seed};
  std::string text;
  for (int d = 0; d < documents; ++d) {
    const int sentences = 3 + static_cast<int>(rng.next() % 6);
    for (int s = 0; s < sentences; ++s) {
      std::string sentence = std::string("The ") + rng.pick(kAdjectives) + " " + rng.pick(kNouns) +
                             " " + rng.pick(kVerbs) + " the " + rng.pick(kNouns);
      switch (rng.next() % 3) {
        case 0: sentence += std::string(" ") + rng.pick(kPrepositions) + " the " + rng.pick(kNouns); break;
        case 1: sentence += std::string(" ") + rng.pick(kAdverbs); break;
        default: sentence += std::string(", and the ") + rng.pick(kNouns) + " " + rng.pick(kVerbs) + " it"; break;
      }
      text += sentence + (s + 1 < sentences ? ". " : ".\n");
      if (s % 3 == 2 && s + 1 < sentences) text += "\n";  // hard-wrapped lines inside a paragraph
    }
    text += "\n";
  }
  return text;
}

int write_test_corpus(const std::string& path, int documents, uint64_t seed) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw std::runtime_error(path + ": cannot write the test corpus");
  out << make_test_corpus(documents, seed);
  return documents;
}

}  // namespace mxablate::test
