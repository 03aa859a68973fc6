#!/usr/bin/env bash
# build.sh builds the OS image lane's disks and updates (make e2e-os,
# test/e2eos, docs/backends.md), cached by content under _cache/osimage/<key>:
#   disk.raw        GPT: ESP (GRUB EFI loader + its environment), rootA (image v1),
#                   rootB (empty), data (/data: RAUC's status, the lane's state)
#   OVMF_VARS.fd    the firmware's variable store, copied per VM by the test
#   v2-good.raucb   a signed RAUC bundle of image v2, which boots
#   v3-broken.raucb a signed RAUC bundle of image v3, whose init exits at once:
#                   its kernel starts and panics, its userspace never comes up
#   ostree-disk.raw GPT: ESP (GRUB EFI loader + its environment), sysroot (an
#                   OSTree sysroot, stateroot "capi", image v1 deployed)
#   ostree-repo/    an OSTree repository (archive mode, served over HTTP by the
#                   test) with commits of v1, v2-good and v3-broken, the same
#                   trees as the slots and bundles; ostree-<version>.commit names
#                   each commit
# Every root filesystem comes from Debian's packages (mmdebstrap), with the node
# agent (capi-inplace-agent, a systemd unit) and the lane's helper
# (test/e2eos/vmhelper) inside. Prints the cache directory.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=../tools/lib.sh
source "$root/hack/tools/lib.sh"
die() { printf "osimage: %s\n" "$*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || die "needs root (mmdebstrap, image files owned by root)"

packages=(systemd systemd-sysv udev dbus linux-image-amd64 initramfs-tools rauc rauc-service
	grub-common e2fsprogs dosfstools iproute2 kmod util-linux mount procps squashfs-tools
	ostree ostree-boot grub2-common)

tools=${OSIMAGE_CACHE:-$root/_cache/osimage}
mkdir -p "$tools"
helper=$tools/capi-inplace-vmhelper
agent=$tools/capi-inplace-agent
# The agent as the release builds it (Makefile build): static, no local paths.
(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$helper.tmp" ./test/e2eos/vmhelper) && mv "$helper.tmp" "$helper"
(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$agent.tmp" ./cmd/capi-inplace-agent) && mv "$agent.tmp" "$agent"

# The content key: this directory (script, overlays, the loaders' scripts, the
# initramfs hooks), the helper, the agent, the packages.
key=$( (cat "$helper" "$agent"; printf '%s\n' "${packages[@]}"
	(cd "$here" && find . -type f | sort | xargs sha256sum)) | sha256sum | cut -c1-16)
out=$tools/$key
if [[ -f $out/done ]]; then
	echo "$out"
	exit 0
fi
start=$SECONDS
# One root filesystem; the versions differ only in what prepare_tree writes.
base=$tools/rootfs-$( (printf '%s\n' "${packages[@]}"; cat "$here"/initramfs/hooks/* "$here"/initramfs/scripts/*/*) | sha256sum | cut -c1-12).tar
# unlock <dir>: ostree marks each deployment immutable (chattr +i); an earlier or
# a failed build's sysroot must be unlocked before it can be removed.
unlock() {
	[[ -d $1 ]] || return 0
	find "$1" -mindepth 5 -maxdepth 7 -type d -path '*/ostree/deploy/*/deploy/*' -prune -exec chattr -i {} + 2>/dev/null || true
}
for d in "$tools"/*/; do unlock "$d"; done
# Earlier builds and root filesystems are hundreds of megabytes each: keep only
# the ones this build uses.
find "$tools" -mindepth 1 -maxdepth 1 \( -type d ! -name "$key" -o -name 'rootfs-*.tar' ! -name "${base##*/}" \) \
	-exec rm -rf {} +
rm -rf "$out" && mkdir -p "$out"
work=$out/work
mkdir -p "$work"

if [[ ! -f $base ]]; then
	log "building the VM root filesystem from Debian packages (first time only)"
	t0=$SECONDS
	# Modules the VM never loads are most of the kernel's size: every slot write and
	# bundle carries them.
	mmdebstrap --quiet --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" \
		--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
		--customize-hook='for d in drivers/gpu drivers/media drivers/net/wireless drivers/net/ethernet drivers/infiniband drivers/staging drivers/bluetooth drivers/iio drivers/hid drivers/usb drivers/input drivers/isdn drivers/mtd drivers/scsi drivers/ata drivers/md drivers/target drivers/thunderbolt sound net/wireless net/bluetooth net/mac80211; do rm -rf "$1"/usr/lib/modules/*/kernel/$d; done' \
		--customize-hook='mkdir -p "$1/etc/initramfs-tools/conf.d"; printf "MODULES=list\n" > "$1/etc/initramfs-tools/conf.d/modules"; printf "virtio_pci\nvirtio_blk\next4\n" > "$1/etc/initramfs-tools/modules"' \
		--customize-hook="cp -a '$here/initramfs/.' \"\$1/etc/initramfs-tools/\"" \
		--customize-hook='chroot "$1" depmod -a "$(ls "$1/usr/lib/modules")" && chroot "$1" update-initramfs -u -k all >/dev/null' \
		--format=tar bookworm "$base.tmp" >&2
	mv "$base.tmp" "$base"
	log "VM root filesystem in $((SECONDS - t0))s ($(du -h "$base" | cut -f1))"
	rootfs_built=$((SECONDS - t0))
fi

# CA and signing key of the bundles; the image trusts the CA. The key never lands
# in $out, which the lane serves to its VMs.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/key.pem" -out "$out/ca.pem" \
	-days 3650 -subj "/CN=capi-inplace OS image lane" 2>/dev/null

# The kernel modules a lane VM loads (`make e2e-os` logs /proc/modules at each
# power-on) and those the image's tools need (RAUC mounts its bundle on a loop
# device; the agent reads GRUB's environment on the FAT ESP). keep_modules keeps
# them and what they depend on.
vm_modules=(virtio_pci virtio_blk virtio_net virtio_rng virtio_console virtio_balloon ext4 vfat
	nls_cp437 nls_ascii nls_iso8859-1 nls_utf8 efivarfs efi_pstore squashfs loop overlay fuse configfs i6300esb iTCO_wdt)

# trim_tree <tree>: removes what no lane VM uses and every slot write and bundle
# download would carry: most of the kernel's modules (two thirds of the root
# file system), udev's hardware database (device descriptions) and the perl that
# usrmerge pulled in for the installation only (perl-base stays).
trim_tree() {
	local tree=$1 kver keep
	kver=$(ls "$tree/usr/lib/modules")
	keep=$(for m in "${vm_modules[@]}"; do chroot "$tree" modprobe -S "$kver" --show-depends "$m"; done |
		awk '$1 == "insmod" { print $2 }' | sort -u)
	[[ -n $keep ]] || die "no kernel module of the VM's list found in $kver"
	(cd "$tree" && find "lib/modules/$kver/kernel" -name '*.ko*' | sed 's|^|/|' | grep -vxF "$keep" |
		sed 's|^/||' | xargs -r rm -f)
	find "$tree/usr/lib/modules/$kver/kernel" -depth -type d -empty -delete
	chroot "$tree" depmod -a "$kver"
	rm -rf "$tree/usr/lib/udev/hwdb.bin" "$tree/usr/lib/udev/hwdb.d" "$tree/usr/share/perl" \
		"$tree/usr/lib/x86_64-linux-gnu/perl" "$tree"/usr/lib/x86_64-linux-gnu/libperl.so*
}

# prepare_tree <version> <tree> <overlay> <mark-good unit>: the root file system
# of one OS image version, for either mechanism.
prepare_tree() {
	local version=$1 tree=$2 overlay=$3 markgood=$4
	rm -rf "$tree" && mkdir -p "$tree"
	tar -xf "$base" -C "$tree"
	trim_tree "$tree"
	cp -a "$overlay/." "$tree/"
	install -m 0755 "$helper" "$tree/usr/local/bin/capi-inplace-vmhelper"
	install -m 0755 "$agent" "$tree/usr/local/bin/capi-inplace-agent"
	echo "capi-inplace-vm-$version" > "$tree/etc/hostname"
	# The image's identity as the node sees it: os-release, read by the test in the VM.
	sed -i '/^VERSION_ID=\|^IMAGE_VERSION=\|^IMAGE_ID=/d' "$tree/usr/lib/os-release"
	printf 'IMAGE_ID=capi-inplace-vm\nIMAGE_VERSION=%s\n' "$version" >> "$tree/usr/lib/os-release"
	# A root without a password on the serial console: a lane VM, never a product image.
	sed -i 's/^root:[^:]*:/root::/' "$tree/etc/shadow"
	local wants=$tree/etc/systemd/system/multi-user.target.wants
	mkdir -p "$wants"
	ln -sf "/etc/systemd/system/$markgood" "$wants/"
	ln -sf /etc/systemd/system/capi-inplace-vmhelper.service "$wants/"
	ln -sf /etc/systemd/system/capi-inplace-agent.service "$wants/"
	ln -sf /lib/systemd/system/systemd-networkd.service "$wants/"
	# Every second of boot is paid about twenty times per lane run under emulation,
	# where every unit competes for the one emulated CPU: no console on a
	# display nobody watches, no scrub of snapshots nobody takes, no logins (root on
	# the serial console needs neither logind nor utmp), no users to create (the
	# packages' scripts did), no journal on disk (the lane reads the current boot's),
	# none of the kernel file systems and modules no tool of the image uses (RAUC's
	# loop device stays).
	for unit in getty@tty1.service e2scrub_reap.service e2scrub_all.timer apt-daily.timer \
		apt-daily-upgrade.timer dpkg-db-backup.timer fstrim.timer \
		systemd-logind.service systemd-user-sessions.service systemd-update-utmp.service \
		systemd-update-utmp-runlevel.service systemd-sysusers.service systemd-journal-flush.service \
		dev-hugepages.mount dev-mqueue.mount sys-kernel-debug.mount sys-kernel-tracing.mount \
		sys-fs-fuse-connections.mount sys-kernel-config.mount modprobe@drm.service \
		modprobe@dm_mod.service modprobe@fuse.service modprobe@efi_pstore.service \
		modprobe@configfs.service; do
		ln -sf /dev/null "$tree/etc/systemd/system/$unit"
	done
	if [[ $version == v3-broken ]]; then
		# An image whose userspace never starts: its init exits at once, the kernel
		# panics ("Attempted to kill init") and, with panic=5, resets the machine.
		rm -f "$tree/sbin/init"
		printf '#!/bin/sh\nexit 1\n' > "$tree/sbin/init"
		chmod 0755 "$tree/sbin/init"
	fi
}

# The packages only the OSTree image uses (one package list, one root file
# system): ostree, its libraries, GnuPG and ICU (through libarchive's libxml2).
# An A/B slot and its bundle would carry 60 MB more with them.
ostree_only=(ostree ostree-boot libostree-1-1 grub2-common libarchive13 libxml2 libicu72 libgpgme11
	gnupg gnupg-l10n gnupg-utils gpg gpg-agent gpg-wks-client gpg-wks-server gpgconf gpgsm dirmngr
	libassuan0 libksba8 libnpth0 pinentry-curses libavahi-client3 libavahi-common-data
	libavahi-common3 libavahi-glib1 libfuse3-3 libreadline8 readline-common libsqlite3-0)

# drop_packages <tree> <package>...: removes the packages' files (not their
# directories) from the tree.
drop_packages() {
	local tree=$1 p list f
	shift
	for p in "$@"; do
		list=$tree/var/lib/dpkg/info/$p.list
		[[ -f $list ]] || list=$tree/var/lib/dpkg/info/$p:amd64.list
		[[ -f $list ]] || die "package $p is not in the root file system"
		while IFS= read -r f; do
			# A directory, or a link to one (usrmerge's /bin, /lib), is shared.
			if [[ ! -d $tree$f && (-L $tree$f || -f $tree$f) ]]; then
				rm -f "$tree$f"
			fi
		done < "$list"
	done
}

# build_version <version> <ext4 image>: the A/B slot file system of one version.
build_version() {
	local version=$1 img=$2 tree=$work/tree-$1
	prepare_tree "$version" "$tree" "$here/rootfs" rauc-mark-good.service
	drop_packages "$tree" "${ostree_only[@]}"
	cp "$out/ca.pem" "$tree/etc/rauc/ca.pem"
	mkdir -p "$tree/efi" "$tree/data"
	# GRUB loads the kernel and initramfs from the slot itself.
	ln -sf "$(cd "$tree" && ls boot/vmlinuz-*)" "$tree/vmlinuz"
	ln -sf "$(cd "$tree" && ls boot/initrd.img-*)" "$tree/initrd.img"
	# Room for a root filesystem that grows a little, no more: RAUC writes the
	# whole file system image into the slot.
	mkfs.ext4 -q -F -L "root-$version" -d "$tree" "$img" "$(($(du -sm "$tree" | cut -f1) * 5 / 4 + 32))M" >&2
	rm -rf "$tree"
}

# ostree_commit <version> <repo>: one version's tree in OSTree's layout, committed
# to repo on branch lane/<version>; prints the commit. The layout is what
# `ostree admin deploy` expects of a commit: the kernel and initramfs under
# /usr/lib/modules/<version>, /etc as /usr/etc (deploy merges it into each
# deployment's /etc), an empty /var (the stateroot's /var is mounted there), the
# directories that hold state as links into /var, /sysroot for the physical root.
ostree_commit() {
	local version=$1 repo=$2 tree=$work/ostree-tree-$1 kver d
	prepare_tree "$version" "$tree" "$here/rootfs-ostree" ostree-mark-good.service
	# Only this image's generator (Debian's 15_ostree writes linux16 entries, and the
	# others would describe the build host or the physical root, not deployments).
	find "$tree/etc/grub.d" -mindepth 1 ! -name 10_capi-ostree -delete
	kver=$(ls "$tree/usr/lib/modules")
	mv "$tree/boot/vmlinuz-$kver" "$tree/usr/lib/modules/$kver/vmlinuz"
	mv "$tree/boot/initrd.img-$kver" "$tree/usr/lib/modules/$kver/initramfs.img"
	rm -rf "$tree/boot" "$tree/vmlinuz" "$tree/vmlinuz.old" "$tree/initrd.img" "$tree/initrd.img.old"
	mkdir "$tree/boot" "$tree/efi" "$tree/sysroot"
	mv "$tree/etc" "$tree/usr/etc"
	rm -rf "$tree/var" "$tree/dev" "$tree/proc" "$tree/sys" "$tree/run" "$tree/tmp"
	mkdir "$tree/var" "$tree/dev" "$tree/proc" "$tree/sys" "$tree/run" "$tree/tmp"
	chmod 1777 "$tree/tmp"
	for d in home:var/home root:var/roothome opt:var/opt srv:var/srv mnt:var/mnt media:run/media; do
		rm -rf "${tree:?}/${d%%:*}"
		ln -s "${d#*:}" "$tree/${d%%:*}"
	done
	ln -s sysroot/ostree "$tree/ostree"
	ostree --repo="$repo" commit --branch="lane/$version" --tree=dir="$tree" \
		--add-metadata-string=version="$version" --subject="capi-inplace-vm $version" --no-xattrs
	rm -rf "$tree"
}

# bundle <version>: a signed RAUC bundle holding the version's root filesystem.
bundle() {
	local version=$1 content=$work/bundle-$1
	mkdir -p "$content"
	build_version "$version" "$content/rootfs.ext4"
	stat -c %s "$content/rootfs.ext4" > "$work/slot-size-$version"
	printf '[update]\ncompatible=capi-inplace-vm\nversion=%s\n\n[bundle]\nformat=plain\n\n[image.rootfs]\nfilename=rootfs.ext4\n' \
		"$version" > "$content/manifest.raucm"
	# lz4: the VM unpacks the bundle under emulation, where gzip costs minutes.
	rauc bundle --mksquashfs-args="-comp lz4" --cert="$out/ca.pem" --key="$work/key.pem" \
		"$content" "$out/$version.raucb" >/dev/null
	rm -rf "$content"
}

log "building OS image versions v1 (slot A), v2-good and v3-broken (bundles)"
t0=$SECONDS
build_version v1 "$work/rootA.ext4"
bundle v2-good
bundle v3-broken

# The EFI system partition: GRUB as the removable-media loader, its environment.
esp=$work/esp.vfat
grub-mkstandalone -O x86_64-efi --locales= --fonts= --themes= \
	--modules="part_gpt fat ext2 loadenv linux test echo normal" \
	-o "$work/BOOTX64.EFI" "boot/grub/grub.cfg=$here/grub.cfg"
grub-editenv "$work/grubenv" create
grub-editenv "$work/grubenv" set ORDER="A B" A_OK=1 A_TRY=0 B_OK=0 B_TRY=0
rm -f "$esp" && mkfs.vfat -C -n ESP "$esp" $((32 * 1024)) >/dev/null
mmd -i "$esp" ::/EFI ::/EFI/BOOT
mcopy -i "$esp" "$work/BOOTX64.EFI" "$work/grubenv" ::/EFI/BOOT/

# The data partition, /data in every slot.
mkdir -p "$work/data/rauc" "$work/data/capi-inplace" "$work/data/capi-inplace-agent"
chmod 0700 "$work/data/capi-inplace" "$work/data/capi-inplace-agent"

# The disk: partitions at fixed MiB offsets, written without loop devices. A slot
# holds the largest version's file system (RAUC writes it whole); the data
# partition a downloaded bundle and the room the agent's store leaves free.
slot=600 data=640
mkfs.ext4 -q -F -L data -d "$work/data" "$work/data.ext4" "${data}M" >&2
disk=$out/disk.raw
rm -f "$disk" && truncate -s $((34 + 2 * slot + data + 16))M "$disk"
sfdisk -q "$disk" <<PARTS
label: gpt
unit: sectors
start=2048, size=$((32 * 2048)), type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=esp
start=$((34 * 2048)), size=$((slot * 2048)), type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=rootA
start=$(((34 + slot) * 2048)), size=$((slot * 2048)), type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=rootB
start=$(((34 + 2 * slot) * 2048)), size=$(((data + 8) * 2048)), type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=data
PARTS
# place <file> <offset MiB> <partition MiB>: a file system larger than its
# partition would be cut off and fail to mount.
place() {
	(($(stat -c %s "$1") <= $3 * 1024 * 1024)) || die "${1##*/} is larger than its ${3} MiB partition"
	dd if="$1" of="$disk" bs=1M seek="$2" conv=notrunc,sparse status=none
}
place "$esp" 1 32
place "$work/rootA.ext4" 34 "$slot"
for v in v2-good v3-broken; do
	[[ -f $work/slot-size-$v ]] && (($(cat "$work/slot-size-$v") <= slot * 1024 * 1024)) || die "bundle $v's file system does not fit a ${slot} MiB slot"
done
place "$work/data.ext4" $((34 + 2 * slot)) "$data"
cp /usr/share/OVMF/OVMF_VARS_4M.fd "$out/OVMF_VARS.fd"
log "RAUC images in $((SECONDS - t0))s: disk $(du -h "$disk" | cut -f1) allocated, bundles $(du -ch "$out"/*.raucb | tail -1 | cut -f1)"
# figure <name> <value>: one line of build.txt, which the lane adds to its figures.
figure() { printf '%s\t%s\n' "$1" "$2" >> "$out/build.txt"; }
figure "RAUC images built in" "$((SECONDS - t0))s"
figure "RAUC disk (allocated)" "$(du -h "$disk" | cut -f1)"
figure "RAUC bundle v2-good" "$(du -h "$out/v2-good.raucb" | cut -f1)"

log "building the OSTree repository (v1, v2-good, v3-broken) and sysroot (v1 deployed)"
t0=$SECONDS
# The repository the VMs pull from: archive mode, served as static files.
orepo=$out/ostree-repo
ostree --repo="$orepo" init --mode=archive
for v in v1 v2-good v3-broken; do
	ostree_commit "$v" "$orepo" > "$out/ostree-$v.commit"
done
# The sysroot: stateroot capi with v1 deployed. Deployed here with no bootloader
# configured (ostree would run grub-mkconfig in a chroot of the deployment, which
# has no /proc or /dev); the first menu is written by the image's own generator,
# then the sysroot uses ostree's grub2 backend from its first boot on.
sysroot=$work/sysroot
mkdir -p "$sysroot"
ostree admin init-fs "$sysroot" >/dev/null
ostree admin os-init capi --sysroot="$sysroot" >/dev/null
srepo=$sysroot/ostree/repo
# v1 is the commit the repository serves too (the node can be asked for it again).
ostree --repo="$srepo" pull-local "$orepo" lane/v1 >&2
ostree admin deploy --sysroot="$sysroot" --os=capi --karg=root=/dev/vda2 --karg=rw --karg=console=ttyS0 \
	--karg=panic=5 --karg=quiet --karg=systemd.show_status=1 "$(cat "$out/ostree-v1.commit")" >&2
unlock "$sysroot"
ostree --repo="$srepo" config set sysroot.bootloader grub2
loader=$(readlink "$sysroot/boot/loader")
mkdir -p "$sysroot/boot/grub"
ln -s ../loader/grub.cfg "$sysroot/boot/grub/grub.cfg"
CAPI_SYSROOT=$sysroot CAPI_GRUBENV='' _OSTREE_GRUB2_BOOTVERSION=${loader#loader.} \
	sh "$here/rootfs-ostree/etc/grub.d/10_capi-ostree" > "$sysroot/boot/$loader/grub.cfg"
grep -q '^menuentry' "$sysroot/boot/$loader/grub.cfg" || die "no menu entry for the deployment of v1"
# The stateroot's /var, shared by every deployment: the agent's state and the
# helper's records.
mkdir -p -m 0700 "$sysroot/ostree/deploy/capi/var/lib/capi-inplace" "$sysroot/ostree/deploy/capi/var/lib/capi-inplace-agent"
mkdir -p "$sysroot/ostree/deploy/capi/var/lib/capi-inplace-lane"

osesp=$work/ostree-esp.vfat
grub-mkstandalone -O x86_64-efi --locales= --fonts= --themes= \
	--modules="part_gpt fat ext2 loadenv linux test echo normal configfile" \
	-o "$work/BOOTX64-ostree.EFI" "boot/grub/grub.cfg=$here/grub-ostree.cfg"
grub-editenv "$work/grubenv-ostree" create
rm -f "$osesp" && mkfs.vfat -C -n ESP "$osesp" $((32 * 1024)) >/dev/null
mmd -i "$osesp" ::/EFI ::/EFI/BOOT
mcopy -i "$osesp" "$work/BOOTX64-ostree.EFI" ::/EFI/BOOT/BOOTX64.EFI
mcopy -i "$osesp" "$work/grubenv-ostree" ::/EFI/BOOT/grubenv
# Room for two more deployments (a deployment shares the unchanged files of the
# repository by hard links; mke2fs -d keeps them) and the pulled objects.
ssize=$(($(du -sm "$sysroot" | cut -f1) + 384))
mkfs.ext4 -q -F -L sysroot -d "$sysroot" "$work/sysroot.ext4" "${ssize}M" >&2
disk=$out/ostree-disk.raw
rm -f "$disk" && truncate -s $((34 + ssize + 8))M "$disk"
sfdisk -q "$disk" <<PARTS
label: gpt
unit: sectors
start=2048, size=$((32 * 2048)), type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=esp
start=$((34 * 2048)), size=$((ssize * 2048)), type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=sysroot
PARTS
place "$osesp" 1 32
place "$work/sysroot.ext4" 34 "$ssize"
log "OSTree images in $((SECONDS - t0))s: disk $(du -h "$disk" | cut -f1) allocated, repository $(du -sh "$orepo" | cut -f1)"
figure "OSTree images built in" "$((SECONDS - t0))s"
figure "OSTree disk (allocated)" "$(du -h "$disk" | cut -f1)"
figure "OSTree repository (v1, v2-good, v3-broken)" "$(du -sh "$orepo" | cut -f1)"
rm -rf "$work"
figure "images built in (${rootfs_built:+Debian root file system ${rootfs_built}s, }$(date -u +%F))" "$((SECONDS - start))s"
touch "$out/done"
log "osimage ready in $((SECONDS - start))s"
echo "$out"
