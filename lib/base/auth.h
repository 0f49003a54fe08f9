// Keys and MACs for authenticating connections (Note [Authentication] in auth.cc), from libsodium: the secret of a
// communicator never crosses the wire, only MACs over fresh nonces.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace chorus::auth {

using Key = std::array<uint8_t, 32>;
using Mac = std::array<uint8_t, 32>;
using Nonce = std::array<uint8_t, 16>;

// A key for one purpose ("bootstrap", "transport hello", ...) from the secret and a context (a communicator id, or
// 0), by keyed BLAKE2b: what one purpose reveals says nothing of another's key or of the secret.
Key derive(uint64_t secret, std::string_view purpose, uint64_t context);
// HMAC-SHA256 over the concatenation of up to three byte ranges.
Mac mac(const Key& key, const void* a, size_t na, const void* b = nullptr, size_t nb = 0, const void* c = nullptr,
        size_t nc = 0);
bool equal(const Mac& x, const uint8_t* y);  // constant time
Nonce freshNonce();                          // from the system's random source
}  // namespace chorus::auth
