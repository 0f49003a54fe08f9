// UCX_TLS's grammar, read the way the UCX transport needs it: which transports the list lets UCX use.
#pragma once

#include <initializer_list>
#include <string_view>

namespace chorus::transport::ucx {

// Whether `tls` (UCX_TLS: a comma list, "all", or "^" and a list to exclude; empty: all) lets UCX use one of
// `names`. Names match whole entries. Conservative for exclusions: "^posix" counts as excluding
// {"posix", "sysv"}.
inline bool tlsListAllows(std::string_view tls, std::initializer_list<std::string_view> names) {
  if (tls.empty()) return true;
  const bool exclude = tls.front() == '^';
  if (exclude) tls.remove_prefix(1);
  bool named = false;
  while (!tls.empty()) {
    const size_t comma = tls.find(',');
    const std::string_view item = tls.substr(0, comma);
    tls = comma == std::string_view::npos ? std::string_view() : tls.substr(comma + 1);
    if (item == "all" && !exclude) return true;
    for (std::string_view n : names) named = named || item == n;
  }
  return exclude ? !named : named;
}

}  // namespace chorus::transport::ucx
