/**
 * The form an account's e-mail is known by: compatibility-normalised (NFKC:
 * full-width letters, ligatures, composed and decomposed accents are one) and
 * case-folded through Unicode's full case mappings, so `ÉLODIE@Example.com`,
 * `élodie@example.com` and `ｅ́lodie@example.com` are one account, and so are
 * `STRASSE@x` and `straße@x` (full case folding maps ß to ss). Done here, not
 * with SQL's lower(), which folds ASCII only under the C locale. Stored in
 * `users.email_normalized` (unique); the e-mail is shown as entered.
 *
 * Lower, upper, lower: each step applies Unicode's full mappings, and the
 * round trip also folds characters with no lower-case form of their own
 * (ẞ) and final sigma; the result is stable under a second pass.
 */
export const normalizeEmail = (email: string): string =>
  email.trim().normalize("NFKC").toLowerCase().toUpperCase().toLowerCase().normalize("NFKC")
