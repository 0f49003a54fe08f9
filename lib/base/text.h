// The small text helpers the settings parsers share (CHORUS_ALGO, CHORUS_TRANSPORTS, CHORUS_PLUGIN_PATH), and JSON
// strings for the flight recorder's dumps.
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
// s as the inside of a JSON string: quotes, backslashes and control characters escaped.
std::string jsonEscape(const std::string& s);

}  // namespace chorus
