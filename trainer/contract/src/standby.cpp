#include "mxablate/contract/standby.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <string_view>

#include "mxablate/contract/run_config.h"

namespace mxablate::contract {

std::optional<int> standby_fd_from_environment() {
  const char* raw = std::getenv(kStandbyFdEnv);
  if (!raw || !*raw) return std::nullopt;
  const std::string_view text(raw);
  const auto shown = [&] { return std::string(text.substr(0, 40)); };
  int fd = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), fd);
  if (ec != std::errc() || end != text.data() + text.size() || fd < 3)
    throw ConfigError(std::string(kStandbyFdEnv) + ": \"" + shown() +
                      "\" is not a descriptor number (>= 3)");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))
    throw ConfigError(std::string(kStandbyFdEnv) + ": descriptor " + shown() +
                      " is not an open pipe or socket");
  // Not passed on: nothing this process starts may inherit the descriptor or the variable.
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  ::unsetenv(kStandbyFdEnv);
  return fd;
}

StandbyRelease wait_for_release(int fd) {
  char byte = 0;
  ssize_t n = 0;
  do {
    n = ::read(fd, &byte, 1);
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  return n == 1 && byte == kStandbyGo ? StandbyRelease::kGo : StandbyRelease::kAbandoned;
}

std::string abandoned_message() {
  return "the orchestrator closed the standby descriptor (it stopped or died) before releasing "
         "this run; exiting without training or writing events";
}

}  // namespace mxablate::contract
