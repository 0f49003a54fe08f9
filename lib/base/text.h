// The small text helpers the settings parsers share (CHORUS_ALGO, CHORUS_TRANSPORTS, CHORUS_PLUGIN_PATH).
#pragma once

#include <string>
#include <vector>

namespace chorus {

// Without leading and trailing blanks and tabs.
std::string trim(const std::string& s);
// ASCII lower case.
std::string lower(std::string s);
// The parts of s between the separators, each trimmed; empty parts kept ("a,,b" -> a, "", b; "" -> one "").
std::vector<std::string> split(const std::string& s, char sep);

}  // namespace chorus
