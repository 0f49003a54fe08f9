// The TCP ports a process listens on: its socket inodes (/proc/PID/fd) against the LISTEN entries of
// /proc/net/tcp and tcp6. For the tests that check what is reachable from outside (strangers, closed listeners).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace chorus::test {

inline std::set<uint16_t> listeningPorts(const std::filesystem::path& proc = "/proc/self") {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(proc / "fd", ec)) {
    std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::set<uint16_t> ports;
  for (const char* file : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream f(file);
    std::string line;
    std::getline(f, line);
    while (std::getline(f, line)) {
      std::istringstream in(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      in >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state == "0A" && inodes.count(inode))  // LISTEN
        ports.insert(static_cast<uint16_t>(std::stoul(local.substr(local.find(':') + 1), nullptr, 16)));
    }
  }
  return ports;
}

}  // namespace chorus::test
