package framework

// GuestMultipathFunctions is a busybox-sh library for guest jobs that
// connect one subsystem ($NQN) through several paths, joined by the
// kernel's native NVMe multipath under one namespace head:
//
//	subsys        the subsystem's sysfs directory
//	ana PORT      the ANA state of the path through PORT as the kernel
//	              has it (none while that path has no namespace yet)
//	headdev       the namespace head's block device (/dev/nvmeXnY)
const GuestMultipathFunctions = `
subsys() {
	for s in /sys/class/nvme-subsystem/nvme-subsys*; do
		[ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$NQN" ] && echo "$s" && return
	done
}
ana() {
	s="$(subsys)"
	for c in "$s"/nvme[0-9]*; do
		grep -q "trsvcid=$1" "$c/address" 2>/dev/null || continue
		cat "$c"/nvme*c*n1/ana_state 2>/dev/null && return
	done
	echo none
}
headdev() {
	s="$(subsys)"
	for n in "$s"/nvme*n1; do
		case "${n##*/}" in *c*) continue ;; esac
		[ -b "/dev/${n##*/}" ] && echo "/dev/${n##*/}" && return
	done
}
`
