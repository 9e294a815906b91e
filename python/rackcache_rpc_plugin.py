"""rackcache's own commands for SPDK's command line (spdk-rpc).

SPDK's stock client knows nothing of bdev_adacache_*, bdev_rbd_blocklist_add
or rackcache_*; this plugin adds a command per method, with options
mirroring the JSON parameters:

    PYTHONPATH=python spdk-rpc --plugin rackcache_rpc_plugin \\
        bdev_adacache_create C0 Ceph0 Nvme0 1024 --write-mode wb

Every option left out is left out of the request (the daemon's default
applies). Nested parameters (cleaning, seq_cutoff) are built from their
flags. See docs/dataplane.md, "Cached volumes", "Fencing another server's
Ceph client" and "Lease and ANA fence".
"""

from spdk.rpc.cmd_parser import print_dict, print_json


def _cleaning(args):
    """The `cleaning` object from --cleaning and its knobs, or None."""
    knobs = {
        'staleness_ms': args.staleness_ms,
        'wake_up_ms': args.wake_up_ms,
        'max_batch': args.max_batch,
        'activity_threshold_ms': args.activity_threshold_ms,
        'dirty_ratio': args.dirty_ratio,
        'batch_blocks': args.batch_blocks,
    }
    given = {k: v for k, v in knobs.items() if v is not None}
    if args.cleaning is None:
        if given:
            raise SystemExit('cleaning parameters need --cleaning nop|lazy|aggressive')
        return None
    return dict(policy=args.cleaning, **given)


def _seq_cutoff(args):
    """The `seq_cutoff` object from --seq-cutoff and its threshold, or None."""
    if args.seq_cutoff is None:
        if args.seq_cutoff_threshold_kib is not None:
            raise SystemExit('--seq-cutoff-threshold-kib needs --seq-cutoff always|full|never')
        return None
    c = {'policy': args.seq_cutoff}
    if args.seq_cutoff_threshold_kib is not None:
        c['threshold_kib'] = args.seq_cutoff_threshold_kib
    return c


def _policy_options(p):
    """Options shared by create and set_policy."""
    p.add_argument('--admission', help='admission policy: always, nhit[:N], tinylfu[:strict], size-aware')
    p.add_argument('--eviction',
                   help='eviction policy: lru2, lazy[:PARA[:K]], s3fifo, sieve, arc, wtinylfu, '
                        'auto[:POLICY+POLICY...] (online choice)')
    p.add_argument('--cleaning', choices=['nop', 'lazy', 'aggressive'], help='cleaning policy')
    p.add_argument('--staleness-ms', type=int, help='lazy: dirty data younger than this is left alone')
    p.add_argument('--wake-up-ms', type=int, help='lazy, aggressive: time between cleaning rounds')
    p.add_argument('--max-batch', type=int, help='lazy: most blocks one round writes back')
    p.add_argument('--activity-threshold-ms', type=int, help='lazy: idle after this long without host I/O')
    p.add_argument('--dirty-ratio', type=float, help='aggressive: dirty share above which cleaning runs')
    p.add_argument('--batch-blocks', type=int, help='aggressive: most blocks one round writes back')
    p.add_argument('--seq-cutoff', choices=['always', 'full', 'never'], help='sequential cutoff policy')
    p.add_argument('--seq-cutoff-threshold-kib', type=int, help='sequential stream length that bypasses the cache')


def _params(**kw):
    return {k: v for k, v in kw.items() if v is not None}


def spdk_rpc_plugin_initialize(subparsers):
    def bdev_adacache_create(args):
        print_json(args.client.call('bdev_adacache_create', _params(
            name=args.name,
            core_bdev_name=args.core_bdev_name,
            cache_bdev_name=args.cache_bdev_name,
            cache_size_mib=args.cache_size_mib,
            write_mode=args.write_mode,
            mode=args.mode,
            block_sizes_kib=[int(s) for s in args.block_sizes_kib.split(',')] if args.block_sizes_kib else None,
            write_miss_fill=args.write_miss_fill,
            fill_size=args.fill_size,
            admission=args.admission,
            eviction=args.eviction,
            cleaning=_cleaning(args),
            seq_cutoff=_seq_cutoff(args),
            role=args.role,
            epoch=args.epoch,
            load=True if args.load else None,
            load_clean=False if args.no_load_clean else None)))
    p = subparsers.add_parser('bdev_adacache_create', help='Create a cached bdev (rackcache)')
    p.add_argument('name', help='name of the cached bdev')
    p.add_argument('core_bdev_name', help='the bdev cached (usually rbd)')
    p.add_argument('cache_bdev_name', help='the bdev holding the cache space (shared by cached bdevs)')
    p.add_argument('cache_size_mib', type=int, help="this volume's share of the cache bdev, MiB")
    p.add_argument('-w', '--write-mode', choices=['wt', 'wb', 'wa', 'pt'], help='cache mode (default wt)')
    p.add_argument('-m', '--mode', choices=['adaptive', 'fixed'], help='block sizes (default adaptive)')
    p.add_argument('--block-sizes-kib', help='comma-separated block sizes in KiB, e.g. 32,64,128,256')
    p.add_argument('--write-miss-fill', choices=['sparse', 'head-tail', 'whole-block'],
                   help='how partial write misses are completed')
    p.add_argument('--fill-size', choices=['request', 'locality'],
                   help='how a miss sizes its block: after the request (default) or by observed locality')
    _policy_options(p)
    p.add_argument('--role', choices=['owner', 'mirror'], help='owner (default) or mirror of another server')
    p.add_argument('--epoch', type=int,
                   help="the control plane's epoch; loaded with one, the volume writes nothing back until confirmed")
    p.add_argument('-l', '--load', action='store_true',
                   help="attach to the volume's existing cache on the cache bdev instead of creating it")
    p.add_argument('--no-load-clean', action='store_true',
                   help='with --load, keep only dirty blocks (what a volume saves after its cache device failed)')
    p.set_defaults(func=bdev_adacache_create)

    def bdev_adacache_delete(args):
        print_json(args.client.call('bdev_adacache_delete', _params(
            name=args.name, force=True if args.force else None)))
    p = subparsers.add_parser('bdev_adacache_delete',
                              help='Delete a cached bdev, writing its dirty data back first')
    p.add_argument('name', help='name of the cached bdev')
    p.add_argument('-f', '--force', action='store_true', help='discard dirty data instead of writing it back')
    p.set_defaults(func=bdev_adacache_delete)

    def bdev_adacache_get_bdevs(args):
        print_dict(args.client.call('bdev_adacache_get_bdevs', _params(name=args.name)))
    p = subparsers.add_parser('bdev_adacache_get_bdevs', help='List cached bdevs')
    p.add_argument('name', nargs='?', help='only this cached bdev')
    p.set_defaults(func=bdev_adacache_get_bdevs)

    def rackcache_get_addresses(args):
        print_dict(args.client.call('rackcache_get_addresses'))
    p = subparsers.add_parser('rackcache_get_addresses',
                              help="The server's interface addresses (for a pool's dataPath.interface or network)")
    p.set_defaults(func=rackcache_get_addresses)

    def rackcache_get_config_errors(args):
        print_dict(args.client.call('rackcache_get_config_errors'))
    p = subparsers.add_parser('rackcache_get_config_errors',
                              help='Start-up configuration calls that failed and are kept for a retry')
    p.set_defaults(func=rackcache_get_config_errors)

    def rackcache_retry_config_errors(args):
        print_dict(args.client.call('rackcache_retry_config_errors'))
    p = subparsers.add_parser('rackcache_retry_config_errors',
                              help='Try the kept failed start-up calls again; those that succeed are forgotten')
    p.set_defaults(func=rackcache_retry_config_errors)

    def rackcache_drop_config_error(args):
        print_json(args.client.call('rackcache_drop_config_error', {'id': args.id}))
    p = subparsers.add_parser('rackcache_drop_config_error',
                              help='Forget a kept failed start-up call (also in the persisted configuration)')
    p.add_argument('id', type=int, help='its id in rackcache_get_config_errors')
    p.set_defaults(func=rackcache_drop_config_error)

    def by_name(method, help, printer=print_dict):
        def run(args):
            printer(args.client.call(method, {'name': args.name}))
        p = subparsers.add_parser(method, help=help)
        p.add_argument('name', help='name of the cached bdev')
        p.set_defaults(func=run)

    by_name('bdev_adacache_get_stats', 'Statistics of a cached bdev')
    by_name('bdev_adacache_get_mrc',
            "A cached bdev's LRU miss-ratio curve: the miss ratio at every cache size the engine tracks")
    by_name('bdev_adacache_reset_stats', 'Reset the statistics of a cached bdev', print_json)
    by_name('bdev_adacache_flush', 'Start writing every dirty block of a cached bdev back', print_json)
    by_name('bdev_adacache_flush_status', 'Progress of the flush of a cached bdev')

    def bdev_adacache_set_mode(args):
        params = {'name': args.name, 'write_mode': args.write_mode}
        if args.no_wait:
            params['wait'] = False
        print_json(args.client.call('bdev_adacache_set_mode', params))
    p = subparsers.add_parser('bdev_adacache_set_mode',
                              help='Change the cache mode of a cached bdev (leaving wb flushes first)')
    p.add_argument('name', help='name of the cached bdev')
    p.add_argument('write_mode', choices=['wt', 'wb', 'wa', 'pt'], help='new cache mode')
    p.add_argument('--no-wait', action='store_true',
                   help='answer once the change is under way (see bdev_adacache_flush_status)')
    p.set_defaults(func=bdev_adacache_set_mode)

    def bdev_adacache_set_policy(args):
        print_json(args.client.call('bdev_adacache_set_policy', _params(
            name=args.name,
            admission=args.admission,
            eviction=args.eviction,
            cleaning=_cleaning(args),
            seq_cutoff=_seq_cutoff(args))))
    p = subparsers.add_parser('bdev_adacache_set_policy',
                              help='Change admission, eviction, cleaning or sequential cutoff of a cached bdev')
    p.add_argument('name', help='name of the cached bdev')
    _policy_options(p)
    p.set_defaults(func=bdev_adacache_set_policy)

    def bdev_adacache_resize(args):
        print_json(args.client.call('bdev_adacache_resize',
                                    {'name': args.name, 'cache_size_mib': args.cache_size_mib}))
    p = subparsers.add_parser('bdev_adacache_resize', help="Change a cached bdev's share of its cache bdev")
    p.add_argument('name', help='name of the cached bdev')
    p.add_argument('cache_size_mib', type=int, help='new share, MiB')
    p.set_defaults(func=bdev_adacache_resize)

    def bdev_adacache_set_role(args):
        print_json(args.client.call('bdev_adacache_set_role',
                                    _params(name=args.name, role=args.role, epoch=args.epoch)))
    p = subparsers.add_parser('bdev_adacache_set_role',
                              help='Make a cached bdev owner or mirror (a mirror writes nothing back)')
    p.add_argument('name', help='name of the cached bdev')
    p.add_argument('role', choices=['owner', 'mirror'], help='new role')
    p.add_argument('-e', '--epoch', type=int, help="the control plane's epoch of the volume (an older one is refused)")
    p.set_defaults(func=bdev_adacache_set_role)

    def bdev_adacache_set_mirror(args):
        params = {'name': args.name}
        if args.traddr:
            params['mirror'] = _params(traddr=args.traddr, trsvcid=args.trsvcid, subnqn=args.subnqn,
                                       hostnqn=args.hostnqn, nsid=args.nsid, dhchap_key=args.dhchap_key,
                                       dhchap_ctrlr_key=args.dhchap_ctrlr_key)
        print_json(args.client.call('bdev_adacache_set_mirror', params))
    p = subparsers.add_parser('bdev_adacache_set_mirror',
                              help="Connect a write-back cached bdev to its mirror's replication subsystem "
                                   '(without -a: drop the mirror)')
    p.add_argument('name', help='name of the cached bdev')
    p.add_argument('-a', '--traddr', help="the mirror's address")
    p.add_argument('-s', '--trsvcid', help="the mirror's port")
    p.add_argument('-n', '--subnqn', help='the replication subsystem')
    p.add_argument('-q', '--hostnqn', help="this server's host NQN, as the mirror allows it")
    p.add_argument('--nsid', type=int, help='namespace (default 1)')
    p.add_argument('--dhchap-key', help='keyring key name of the host secret')
    p.add_argument('--dhchap-ctrlr-key', help='keyring key name of the controller secret')
    p.set_defaults(func=bdev_adacache_set_mirror)

    def bdev_rbd_blocklist_add(args):
        print_json(args.client.call('bdev_rbd_blocklist_add', _params(
            cluster_name=args.cluster_name,
            client_address=args.client_address,
            expire_seconds=args.expire_seconds)))
    p = subparsers.add_parser('bdev_rbd_blocklist_add',
                              help="Blocklist (fence) another server's Ceph client through a registered cluster")
    p.add_argument('cluster_name', help='the registered cluster to ask Ceph through')
    p.add_argument('client_address',
                   help="the client's address, IP:PORT/NONCE (its server's bdev_rbd_get_clusters_info)")
    p.add_argument('-e', '--expire-seconds', type=int, help='how long Ceph keeps it blocklisted (default 3600)')
    p.set_defaults(func=bdev_rbd_blocklist_add)

    def rackcache_lease_renew(args):
        print_dict(args.client.call('rackcache_lease_renew',
                                    {'holder': args.holder, 'duration_ms': args.duration_ms}))
    p = subparsers.add_parser('rackcache_lease_renew',
                              help='Grant or renew the lease on the ANA paths; when it runs out they are fenced')
    p.add_argument('holder', help='who renews (for the logs)')
    p.add_argument('duration_ms', type=int, help='how long it lasts from now, ms (1000 to 600000)')
    p.set_defaults(func=rackcache_lease_renew)

    def rackcache_lease_get(args):
        print_dict(args.client.call('rackcache_lease_get'))
    p = subparsers.add_parser('rackcache_lease_get',
                              help='The lease on the ANA paths: granted, fenced, time left, holder')
    p.set_defaults(func=rackcache_lease_get)

    def bdev_adacache_get_devices(args):
        print_dict(args.client.call('bdev_adacache_get_devices'))
    p = subparsers.add_parser('bdev_adacache_get_devices',
                              help='List cache devices: capacity, free space and the volumes on each')
    p.set_defaults(func=bdev_adacache_get_devices)
