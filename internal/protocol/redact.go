package protocol

import "regexp"

// Redacted stands for a secret value in every text the agent and the coordinator
// produce (status, hook messages, conditions, Events, logs).
const Redacted = "<redacted>"

// cryptHashRE matches crypt(3) hashes as /etc/shadow and KubeadmConfig passwd
// hold them: MD5 ($1$), bcrypt ($2a$ $2b$ $2x$ $2y$), SHA-256/512 ($5$ $6$, with
// rounds=), yescrypt ($y$), gost-yescrypt ($gy$), scrypt ($7$), sha1crypt and
// argon2 variants.
var cryptHashRE = regexp.MustCompile(`\$(?:1|2[abxy]|5|6|y|gy|7|sha1|md5|argon2(?:id|i|d))\$[A-Za-z0-9./$=,+-]+`)

// RedactKnownSecrets replaces every crypt(3) password hash in s with Redacted.
// It is the last line of defence wherever text leaving a component is built from
// errors: the agent's status, the coordinator's answers, conditions and Events.
func RedactKnownSecrets(s string) string {
	return cryptHashRE.ReplaceAllString(s, Redacted)
}
