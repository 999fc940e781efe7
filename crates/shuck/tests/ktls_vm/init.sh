#!/bin/busybox sh
# PID 1 of the kTLS test's guest (tests/ktls_vm.rs): Debian's kernel, which has the tls module,
# booted in qemu with this initramfs. Every check prints "KTLS-VM ok: ..." or ends the run with
# "KTLS-VM FAIL: ..."; the last line is "KTLS-VM PASS". Every wait is bounded.
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp

fail() {
    echo "KTLS-VM FAIL: $*"
    [ -f /tmp/shuck.log ] && sed 's/^/shuck: /' /tmp/shuck.log
    poweroff -f
}
ok() { echo "KTLS-VM ok: $*"; echo "KTLS-VM counted: $(curl -s http://127.0.0.1:9090/metrics | grep '^shuck_ktls_connections_total' | sed 's/.*records=//' | tr '\n' ' ')"; }

# The tls module and the AEADs it asks the crypto API for (no modprobe here to load them on
# demand), in dependency order (their names start with it).
for m in /modules/*.ko; do
    insmod "$m" || fail "insmod $m"
done
grep -qw tls /proc/sys/net/ipv4/tcp_available_ulp || fail "no tls ULP after insmod"
ip link set lo up || fail "loopback"

# The backend: busybox httpd with a small page, 2 MiB of random bytes, and a CGI that answers
# with the SHA-256 of what was posted.
mkdir -p /www/cgi-bin
echo "small answer" >/www/small
dd if=/dev/urandom of=/www/big bs=1024 count=2048 2>/dev/null
printf '#!/bin/sh\nprintf "Content-Type: text/plain\\r\\n\\r\\n"\nhead -c "$CONTENT_LENGTH" | sha256sum | cut -d" " -f1\n' >/www/cgi-bin/sum
chmod +x /www/cgi-bin/sum
httpd -p 127.0.0.1:8080 -h /www || fail "httpd"
big_sum=$(sha256sum </www/big | cut -d' ' -f1)

/shuck serve --config /ktls.toml --ready-file /tmp/ready >/tmp/shuck.log 2>&1 &
i=0
while [ ! -s /tmp/ready ]; do
    i=$((i + 1))
    [ $i -gt 600 ] && fail "shuck not ready in 60 s"
    sleep 0.1
done

get() { curl -sS --max-time 60 -k "$@"; }

[ "$(get https://127.0.0.1:8443/small)" = "small answer" ] || fail "small answer"
ok "small answer"
# Each cipher the kernel can take, named: with no AES instructions in the guest's CPU, the
# server would otherwise choose ChaCha20 every time.
[ "$(get --tls13-ciphers TLS_AES_256_GCM_SHA384 https://127.0.0.1:8443/big |
    sha256sum | cut -d' ' -f1)" = "$big_sum" ] || fail "2 MiB download, AES-256-GCM"
ok "2 MiB download, AES-256-GCM"
[ "$(get --tls13-ciphers TLS_AES_128_GCM_SHA256 --data-binary @/www/big \
    https://127.0.0.1:8443/cgi-bin/sum)" = "$big_sum" ] || fail "2 MiB upload, AES-128-GCM"
ok "2 MiB upload, AES-128-GCM"
# 20 MiB, more bytes than AES-GCM's 2^24 records: shuck bounds the records the kernel sealed by
# the bytes written, and past that bound reads the kernel's own count, which is far below the
# limit, so no KeyUpdate is sent (this kernel could not take the new keys: the download would
# fail).
dd if=/dev/urandom of=/www/huge bs=1M count=20 2>/dev/null
huge_sum=$(sha256sum </www/huge | cut -d' ' -f1)
[ "$(get --max-time 240 --tls13-ciphers TLS_AES_128_GCM_SHA256 https://127.0.0.1:8443/huge |
    sha256sum | cut -d' ' -f1)" = "$huge_sum" ] || fail "20 MiB download, AES-128-GCM"
rm /www/huge
ok "20 MiB download, AES-128-GCM, past the bound on records"
# A slow reader: shuck's socket stays full, so the kernel holds records it could not push yet
# when the backend has finished; they must all arrive before the end.
[ "$(get --limit-rate 400k https://127.0.0.1:8443/big | sha256sum | cut -d' ' -f1)" = "$big_sum" ] ||
    fail "2 MiB download, slow reader"
ok "2 MiB download, slow reader"
# ...and one that half-closes (close_notify and FIN) a quarter into the answer, then reads on.
SHUCK_GUEST_CA=/ca.pem SHUCK_GUEST_SHA256=$big_sum timeout 150 /ktls-client --ignored --exact \
    ktls::guest_client_half_closes_and_reads_slowly --test-threads 1 >/tmp/client.log 2>&1 ||
    fail "half-closed slow reader: $(cat /tmp/client.log)"
# libtest succeeds when no test matches the name: the client must have run.
grep -q "1 passed" /tmp/client.log || fail "half-closed slow reader: no test ran: $(cat /tmp/client.log)"
ok "2 MiB download, slow reader that half-closed first"

# A request sent well after the handshake: it can only arrive through the kernel's records.
late=$( (sleep 2; printf 'GET /small HTTP/1.0\r\n\r\n'; sleep 4) |
    timeout 30 openssl s_client -connect 127.0.0.1:8443 -quiet \
        -ciphersuites TLS_AES_128_GCM_SHA256 2>/dev/null)
case "$late" in *"small answer"*) ok "late request, AES-128-GCM" ;; *) fail "late request: $late" ;; esac
SHUCK_GUEST_CA=/ca.pem timeout 60 /ktls-client --ignored --exact \
    ktls::guest_client_gets_the_fin_after_close_notify --test-threads 1 >/tmp/client.log 2>&1 ||
    fail "FIN after close_notify: $(cat /tmp/client.log)"
grep -q "1 passed" /tmp/client.log || fail "FIN after close_notify: no test ran: $(cat /tmp/client.log)"
ok "FIN after close_notify"
# ...and its end: shuck's close_notify, sent by the kernel as an alert record (-msg shows it).
late=$( (sleep 2; printf 'GET /small HTTP/1.0\r\n\r\n'; sleep 4) |
    timeout 30 openssl s_client -connect 127.0.0.1:8443 -quiet -msg \
        -ciphersuites TLS_CHACHA20_POLY1305_SHA256 2>/dev/null)
case "$late" in *"small answer"*) ;; *) fail "ChaCha20: $late" ;; esac
case "$late" in *"<<< TLS 1.3, Alert"*"close_notify"*) ok "late request, ChaCha20, close_notify" ;;
*) fail "no close_notify: $late" ;; esac

metrics=$(get http://127.0.0.1:9090/metrics)
kernel=$(echo "$metrics" | grep '^shuck_ktls_connections_total{.*records="kernel"' | sed 's/.* //')
user=$(echo "$metrics" | grep '^shuck_ktls_connections_total{.*records="user_space"' | sed 's/.* //')
[ "$kernel" = 9 ] && [ "$user" = 0 ] || fail "ktls counters: kernel=$kernel user_space=$user"
ok "9 connections in the kernel, none in user space"

# The client asks for a KeyUpdate ("K" on s_client's input), then sends a request. A kernel
# that can be rekeyed carries on; one that cannot (6.1) must end that connection with shuck's
# reason in its log, and shuck must go on serving.
ku=$( (sleep 2; echo K; sleep 2; printf 'GET /small HTTP/1.0\r\n\r\n'; sleep 4) |
    timeout 30 openssl s_client -connect 127.0.0.1:8443 -tls1_3 2>&1)
case "$ku" in
*"small answer"*) ok "KeyUpdate: rekeyed" ;;
*)
    i=0
    until grep -q "cannot be rekeyed" /tmp/shuck.log; do
        i=$((i + 1))
        [ $i -gt 100 ] && fail "KeyUpdate: no answer and no reason logged: $ku"
        sleep 0.1
    done
    ok "KeyUpdate: refused, reason logged"
    ;;
esac
[ "$(get https://127.0.0.1:8443/small)" = "small answer" ] || fail "serving after the KeyUpdate"
ok "still serving"
sed 's/^/shuck: /' /tmp/shuck.log
echo "KTLS-VM PASS"
poweroff -f
