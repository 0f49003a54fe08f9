#include "lib/base/auth.h"

#include <sodium.h>

#include <cstring>

#include "lib/base/error.h"

namespace chorus::auth {

// Note [Authentication]:
// Every rank of a communicator knows its 64-bit secret (from the unique id, or CHORUS_SECRET); nobody else should
// be able to join it, feed it a bootstrap table, or open a connection to one of its transports. The secret itself
// never crosses the wire: each side proves it knows it by a MAC (HMAC-SHA256) under a key derived from it, over
// what it sends and a nonce the other side chose freshly, so a recorded exchange proves nothing a second time.
//   - Bootstrap (root and joiners, also the rendezvous of split and shrink): the root sends a fresh nonce on
//     accept; the joiner answers with its own nonce and its frame, MAC'd over the root's nonce; the root answers
//     with the table, MAC'd over the joiner's nonce. Both sides are authenticated, and neither message can be
//     replayed to another connection.
//   - Transports: a connection opens with one Hello (no round trip, so that ranks connecting to each other never
//     wait on one another's accept loop). Its MAC is keyed per communicator (the key is derived with the
//     communicator's id, fresh from the root each time) and covers a fresh nonce; the acceptor refuses a nonce it
//     has seen. A Hello recorded from one communicator is worthless to any other, and inside its own it is refused
//     as a replay.
// A launcher that sets no secret (chorusCommInitFromEnv without CHORUS_SECRET) gets the default secret, known to
// everyone: the exchanges then only keep out what is not Chorus, and the library says so once at INFO.

namespace {
void initOnce() {
  static const bool ok = sodium_init() >= 0;
  if (!ok) fail(chorusSystemError, "libsodium failed to initialise");
}
}  // namespace

Key derive(uint64_t secret, std::string_view purpose, uint64_t context) {
  initOnce();
  uint8_t keyBytes[crypto_generichash_KEYBYTES] = {};
  std::memcpy(keyBytes, &secret, sizeof secret);
  std::memcpy(keyBytes + sizeof secret, &context, sizeof context);
  Key k;
  crypto_generichash(k.data(), k.size(), reinterpret_cast<const uint8_t*>(purpose.data()), purpose.size(), keyBytes,
                     sizeof keyBytes);
  return k;
}

Mac mac(const Key& key, const void* a, size_t na, const void* b, size_t nb, const void* c, size_t nc) {
  static_assert(sizeof(Key) == crypto_auth_hmacsha256_KEYBYTES && sizeof(Mac) == crypto_auth_hmacsha256_BYTES);
  initOnce();
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, key.data(), key.size());
  if (na) crypto_auth_hmacsha256_update(&st, static_cast<const uint8_t*>(a), na);
  if (nb) crypto_auth_hmacsha256_update(&st, static_cast<const uint8_t*>(b), nb);
  if (nc) crypto_auth_hmacsha256_update(&st, static_cast<const uint8_t*>(c), nc);
  Mac m;
  crypto_auth_hmacsha256_final(&st, m.data());
  return m;
}

bool equal(const Mac& x, const uint8_t* y) { return sodium_memcmp(x.data(), y, x.size()) == 0; }

Nonce freshNonce() {
  initOnce();
  Nonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

}  // namespace chorus::auth
