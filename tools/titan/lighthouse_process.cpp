#include "lighthouse_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "titan/assets.hpp"

namespace titan::cli {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kStartTimeout = std::chrono::seconds(30);

bool accepts_connections(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool connected = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  close(fd);
  return connected;
}

// .venv's Python (where scripts/setup.sh installs torchft), else python3.
std::string python_with_torchft() {
  const std::string venv = resolve_asset(".venv/bin/python");
  return std::filesystem::exists(venv) ? venv : "python3";
}

}  // namespace

LighthouseProcess::LighthouseProcess(const LighthouseOptions& options) : options_(options) {
  const std::string script = resolve_asset("scripts/lighthouse.py");
  if (!std::filesystem::exists(script)) {
    throw std::runtime_error("--start-lighthouse: scripts/lighthouse.py is not beside this titan (it ships in "
                             "Titan's source tree); start torchft's Lighthouse yourself (torchft_lighthouse "
                             "--min_replicas N) and set TORCHFT_LIGHTHOUSE");
  }
  const std::string port = std::to_string(options_.port);
  if (accepts_connections(options_.port)) {
    throw std::runtime_error("--start-lighthouse " + port + ": something already listens on port " + port +
                             "; choose another port, or point the ranks at that Lighthouse (TORCHFT_LIGHTHOUSE) "
                             "without --start-lighthouse");
  }
  std::vector<std::string> arguments = {python_with_torchft(), script, "--bind", "[::]:" + port, "--min_replicas",
                                        std::to_string(options_.min_replicas)};
  arguments.insert(arguments.end(), options_.extra_args.begin(), options_.extra_args.end());
  std::vector<char*> argv;
  for (auto& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);

  const pid_t launcher = getpid();
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error(std::string("--start-lighthouse: fork: ") + std::strerror(errno));
  if (pid_ == 0) {
    setpgid(0, 0);  // out of the terminal's group: the launcher stops it when the job ends
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(1);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  const auto deadline = Clock::now() + kStartTimeout;
  while (!accepts_connections(options_.port)) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = 0;
      const std::string how = WIFEXITED(status) ? "exited with code " + std::to_string(WEXITSTATUS(status))
                                                : "died of signal " + std::to_string(WTERMSIG(status));
      throw std::runtime_error("--start-lighthouse: torchft's Lighthouse (" + arguments[0] + " " + script + ") " +
                               how + " before listening on port " + port +
                               " (its output is above; scripts/setup.sh installs torchft into .venv)");
    }
    if (Clock::now() >= deadline) {
      stop();
      throw std::runtime_error("--start-lighthouse: torchft's Lighthouse did not listen on port " + port +
                               " within 30 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

LighthouseProcess::~LighthouseProcess() { stop(); }

void LighthouseProcess::stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < deadline) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = 0;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = 0;
}

std::string LighthouseProcess::local_address() const { return "http://127.0.0.1:" + std::to_string(options_.port); }

}  // namespace titan::cli
