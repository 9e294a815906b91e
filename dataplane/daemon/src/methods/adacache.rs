//! Cached volumes (`bdev_adacache_*`): a bdev that puts a share of a cache
//! device in front of a core bdev (the `cache` crate does the caching;
//! these handlers create, inspect, tune and delete them).
//!
//! The daemon keeps one [`CacheDevice`] per cache bdev (`State::caches`),
//! opened by the first create on it and shared by every volume there. A
//! cached bdev claims its core and cache bdevs (`State::wrapper_of`), and
//! `save_config` records it with its current parameters and `load`
//! (`RegisteredBdev::config_call`), after both, so a restore attaches to
//! the cache on the device and never formats it.
//!
//! Long operations (flushing, deleting) hold the control lock: other
//! control calls wait, the data path does not (it never takes the lock).

use std::sync::Arc;

use bdev::Bdev;
use cache::device::{CacheDevice, Format};
use cache::volume::{CacheMode, CachedVolume, Cleaning, PolicyChange, SeqCutoff, VolumeParams};
use serde::Deserialize;
use serde_json::{json, Value};

use super::registry::{check_name, exists, register, uuid_string};
use crate::app::{App, IoStats, State};
use crate::cached_volumes::{as_volume, volumes};
use crate::rpc::error::{libc_errno, RpcError};

/// Cached bdev `name` (a handle sharing it).
pub(super) fn volume(state: &State, name: &str) -> Result<CachedVolume, RpcError> {
    state
        .bdevs
        .get(name)
        .and_then(|(_, r)| as_volume(&r.bdev).cloned())
        .ok_or_else(|| {
            RpcError::errno(
                libc_errno::ENODEV,
                format!("no cached bdev named {name} (see bdev_adacache_get_bdevs)"),
            )
        })
}

/// `driver_specific` of `bdev_get_bdevs` for a cached bdev.
pub(crate) fn driver_specific(v: &CachedVolume) -> Value {
    json!({ "adacache": summary(v) })
}

/// What `bdev_adacache_get_bdevs` shows of one cached bdev.
fn summary(v: &CachedVolume) -> Value {
    let p = v.params();
    let name = p.name.clone();
    let capacity_mib = v
        .cache_device()
        .find_volume(&name)
        .map(|r| r.units.len() as u64);
    json!({
        "name": name,
        "core_bdev_name": v.core_name(),
        "cache_bdev_name": v.cache_name(),
        "write_mode": p.write_mode,
        "mode": p.mode,
        "cache_size_mib": capacity_mib.unwrap_or(p.cache_size_mib),
        "degraded": v.degraded(),
        "params": p,
    })
}

pub(super) fn volume_error(what: &str, e: cache::volume::VolumeError) -> RpcError {
    RpcError::cache(what, &e)
}

/// Refuses a base bdev another user holds: a namespace exports it, or a
/// bdev is built on it. A cache bdev may be shared by cached bdevs, in
/// that role only (`cache_role`); a bdev holding a cache device is never a
/// core.
fn check_base(state: &State, name: &str, role: &str, cache_role: bool) -> Result<(), RpcError> {
    if !state.bdevs.contains_key(name) {
        return Err(RpcError::errno(
            libc_errno::ENODEV,
            format!("{role} bdev {name} does not exist: create it first"),
        ));
    }
    if let Some((nqn, nsid)) = state.nvmf.claims(name).into_iter().next() {
        return Err(RpcError::errno(
            libc_errno::EBUSY,
            format!("{role} bdev {name} is claimed by namespace {nsid} of NVMe-oF subsystem {nqn}; remove the namespace first (nvmf_subsystem_remove_ns)"),
        ));
    }
    let user = state.bdevs.iter().find_map(|(user, (_, r))| {
        let uses = match r.bdev.as_ref() {
            Bdev::Delay(d) => d.base().info().name == name,
            Bdev::Error(e) => e.base().info().name == name,
            b => as_volume(b)
                .is_some_and(|v| v.core_name() == name || (!cache_role && v.cache_name() == name)),
        };
        uses.then_some(user)
    });
    if let Some(user) = user {
        return Err(RpcError::errno(
            libc_errno::EBUSY,
            format!("{role} bdev {name} is claimed by bdev {user}"),
        ));
    }
    if !cache_role && state.caches.contains_key(name) {
        return Err(RpcError::errno(
            libc_errno::EBUSY,
            format!("{role} bdev {name} holds a cache device; use another bdev as core"),
        ));
    }
    Ok(())
}

pub(crate) async fn create(app: &App, p: VolumeParams) -> Result<Value, RpcError> {
    check_name(&p.name)?;
    p.validate().map_err(RpcError::invalid_params)?;
    if p.core_bdev_name == p.cache_bdev_name {
        return Err(RpcError::invalid_params(format!(
            "core_bdev_name and cache_bdev_name are both {}: the cache needs a bdev of its own",
            p.core_bdev_name
        )));
    }
    let mut state = app.state.lock().await;
    exists(&state, &p.name)?;
    check_base(&state, &p.core_bdev_name, "core", false)?;
    check_base(&state, &p.cache_bdev_name, "cache", true)?;
    let what = format!("cached bdev {}", p.name);
    // Also checked when the volume opens; here it comes before a blank
    // cache device is formatted, so the refusal changes nothing.
    let core_bytes = state.bdevs[&p.core_bdev_name].1.bdev.info().size_bytes();
    p.check_core_size(core_bytes)
        .map_err(|e| RpcError::errno(libc_errno::EINVAL, format!("{what}: {e}")))?;
    let device = match state.caches.get(&p.cache_bdev_name) {
        Some(d) if p.force_format => {
            let users: Vec<String> = d.volumes().into_iter().map(|v| v.name).collect();
            return Err(RpcError::errno(
                libc_errno::EBUSY,
                format!(
                    "{what}: force_format refused: cache bdev {} is in use (volumes {users:?}); it erases only a device no cached bdev has opened",
                    p.cache_bdev_name
                ),
            ));
        }
        Some(d) => Arc::clone(d),
        None => {
            let reg = &state.bdevs[&p.cache_bdev_name].1;
            // Refused before a blank device is formatted, so the refusal
            // changes nothing.
            let units = cache::layout::Geometry::for_device(reg.bdev.info().size_bytes()).units;
            if !p.load && p.cache_size_mib > u64::from(units) {
                return Err(RpcError::errno(
                    libc_errno::ENOSPC,
                    format!(
                        "{what}: cache bdev {} holds at most {units} MiB of cache, {} asked (cache_size_mib)",
                        p.cache_bdev_name, p.cache_size_mib
                    ),
                ));
            }
            // `load` attaches to what is there: it never formats. Without
            // it only a blank device is formatted, unless the caller said
            // to erase whatever is there.
            let how = match (p.load, p.force_format) {
                (true, _) => Format::Never,
                (false, false) => Format::IfBlank,
                (false, true) => Format::Wipe,
            };
            if how == Format::Wipe {
                tracing::warn!(bdev = %p.cache_bdev_name, volume = %p.name,
                    "force_format: erasing the cache device");
            }
            let d = CacheDevice::open_with(reg.counted(), how)
                .await
                .map_err(|e| volume_error(&what, e.into()))?;
            state
                .caches
                .insert(p.cache_bdev_name.clone(), Arc::clone(&d));
            d
        }
    };
    let core = state.bdevs[&p.core_bdev_name].1.counted();
    let name = p.name.clone();
    let load = p.load;
    let v = CachedVolume::create(p, core, device)
        .await
        .map_err(|e| volume_error(&what, e))?;
    let bdev = v.bdev();
    let params = json!(v.params());
    register(
        app,
        &mut state,
        name.clone(),
        bdev,
        "bdev_adacache_create",
        params,
        None,
    );
    app.cache_metrics.add(&app.metrics, &v);
    tracing::info!(bdev = %name, core = %v.core_name(), cache = %v.cache_name(), load, "cached bdev created");
    Ok(json!(name))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Delete {
    name: String,
    /// Discard dirty data instead of writing it back first.
    #[serde(default)]
    force: bool,
}

pub(crate) async fn delete(app: &App, Delete { name, force }: Delete) -> Result<Value, RpcError> {
    let mut state = app.state.lock().await;
    if !state.bdevs.contains_key(&name) {
        return delete_unattached(&state, &name, force).await;
    }
    let v = volume(&state, &name)?;
    if let Some(user) = state.wrapper_of(&name) {
        return Err(RpcError::errno(
            libc_errno::EBUSY,
            format!("bdev {name} is claimed by bdev {user}; delete that first"),
        ));
    }
    if let Some((nqn, nsid)) = state.nvmf.claims(&name).into_iter().next() {
        return Err(RpcError::errno(
            libc_errno::EBUSY,
            format!("bdev {name} is claimed by namespace {nsid} of NVMe-oF subsystem {nqn}; remove the namespace first (nvmf_subsystem_remove_ns)"),
        ));
    }
    let what = format!("deleting cached bdev {name}");
    if !force {
        // Written back and checked before anything is torn down: if core
        // refuses the dirty data, the volume stays as it was.
        v.flush_all().await.map_err(|e| {
            volume_error(
                &format!("{what} (dirty data kept; retry, or force=true to discard it)"),
                e,
            )
        })?;
    }
    v.delete(force).await.map_err(|e| volume_error(&what, e))?;
    state.bdevs.remove(&name);
    IoStats::unregister(&app.metrics, &name);
    app.cache_metrics.remove(&app.metrics, &name);
    tracing::info!(bdev = %name, force, "cached bdev deleted");
    Ok(json!(true))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OptName {
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ByName {
    name: String,
}

pub(crate) async fn get_bdevs(app: &App, OptName { name }: OptName) -> Result<Value, RpcError> {
    let state = app.state.lock().await;
    let list = match name {
        Some(n) => vec![volume(&state, &n)?],
        None => volumes(&state),
    };
    Ok(Value::Array(list.iter().map(summary).collect()))
}

pub(crate) async fn get_stats(app: &App, ByName { name }: ByName) -> Result<Value, RpcError> {
    let v = volume(&*app.state.lock().await, &name)?;
    let s = v
        .stats()
        .await
        .map_err(|e| volume_error(&format!("statistics of {name}"), e))?;
    Ok(json!(s))
}

/// `bdev_adacache_get_mrc`: the volume's whole LRU miss-ratio curve (a
/// diagnostic: every point the engine keeps, about a thousand at most).
pub(crate) async fn get_mrc(app: &App, ByName { name }: ByName) -> Result<Value, RpcError> {
    let v = volume(&*app.state.lock().await, &name)?;
    let c = v
        .miss_ratio_curve()
        .await
        .map_err(|e| volume_error(&format!("miss-ratio curve of {name}"), e))?;
    Ok(json!(c))
}

pub(crate) async fn reset_stats(app: &App, ByName { name }: ByName) -> Result<Value, RpcError> {
    let v = volume(&*app.state.lock().await, &name)?;
    // The counters on /metrics never go down: they take in what happened
    // up to now before the volume's figures restart from zero.
    app.cache_metrics
        .reset(&v, || async {
            v.reset_stats()
                .await
                .map_err(|e| volume_error(&format!("resetting statistics of {name}"), e))
        })
        .await?;
    Ok(json!(true))
}

pub(crate) async fn flush(app: &App, ByName { name }: ByName) -> Result<Value, RpcError> {
    let v = volume(&*app.state.lock().await, &name)?;
    v.start_flush()
        .await
        .map_err(|e| volume_error(&format!("flushing {name}"), e))?;
    Ok(json!(true))
}

pub(crate) async fn flush_status(app: &App, ByName { name }: ByName) -> Result<Value, RpcError> {
    let v = volume(&*app.state.lock().await, &name)?;
    let s = v
        .flush_status()
        .await
        .map_err(|e| volume_error(&format!("flush status of {name}"), e))?;
    Ok(json!(s))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SetMode {
    name: String,
    write_mode: CacheMode,
    /// `false`: answer once the change is under way (leaving write-back,
    /// its flush shows in `bdev_adacache_flush_status`, and the mode in
    /// `bdev_adacache_get_bdevs` once it is done). Default `true`.
    #[serde(default)]
    wait: Option<bool>,
}

pub(crate) async fn set_mode(
    app: &App,
    SetMode {
        name,
        write_mode,
        wait,
    }: SetMode,
) -> Result<Value, RpcError> {
    // Held: leaving write-back flushes first, and no other change may
    // interleave with it.
    let state = app.state.lock().await;
    let v = volume(&state, &name)?;
    if wait == Some(false) {
        v.start_set_mode(write_mode).await.map_err(|e| {
            volume_error(
                &format!(
                    "starting to set the cache mode of {name} to {}",
                    write_mode.name()
                ),
                e,
            )
        })?;
        tracing::info!(bdev = %name, mode = write_mode.name(), "cache mode change started");
        return Ok(json!(true));
    }
    v.set_mode(write_mode).await.map_err(|e| {
        volume_error(
            &format!("setting the cache mode of {name} to {}", write_mode.name()),
            e,
        )
    })?;
    tracing::info!(bdev = %name, mode = write_mode.name(), "cache mode set");
    Ok(json!(true))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SetPolicy {
    name: String,
    admission: Option<String>,
    eviction: Option<String>,
    cleaning: Option<Cleaning>,
    seq_cutoff: Option<SeqCutoff>,
}

pub(crate) async fn set_policy(app: &App, p: SetPolicy) -> Result<Value, RpcError> {
    if p.admission.is_none()
        && p.eviction.is_none()
        && p.cleaning.is_none()
        && p.seq_cutoff.is_none()
    {
        return Err(RpcError::invalid_params(
            "nothing to change: give admission, eviction, cleaning or seq_cutoff",
        ));
    }
    let state = app.state.lock().await;
    let v = volume(&state, &p.name)?;
    let change = PolicyChange {
        admission: p.admission,
        eviction: p.eviction,
        cleaning: p.cleaning,
        seq_cutoff: p.seq_cutoff,
    };
    v.set_policy(change)
        .await
        .map_err(|e| volume_error(&format!("changing the policies of {}", p.name), e))?;
    tracing::info!(bdev = %p.name, "cache policies changed");
    Ok(json!(true))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Resize {
    name: String,
    cache_size_mib: u64,
}

pub(crate) async fn resize(
    app: &App,
    Resize {
        name,
        cache_size_mib,
    }: Resize,
) -> Result<Value, RpcError> {
    if cache_size_mib == 0 {
        return Err(RpcError::invalid_params(
            "cache_size_mib must be at least 1 (bdev_adacache_delete removes the cache)",
        ));
    }
    let state = app.state.lock().await;
    let v = volume(&state, &name)?;
    v.resize(cache_size_mib).await.map_err(|e| {
        volume_error(
            &format!("resizing the cache of {name} to {cache_size_mib} MiB"),
            e,
        )
    })?;
    tracing::info!(bdev = %name, cache_size_mib, "cache resized");
    Ok(json!(true))
}

pub(crate) async fn get_devices(app: &App, _: super::params::NoParams) -> Result<Value, RpcError> {
    let state = app.state.lock().await;
    let attached = volumes(&state);
    let list = state
        .caches
        .iter()
        .map(|(name, d)| {
            let vols: Vec<Value> = d
                .volumes()
                .iter()
                .map(|r| {
                    json!({
                        "name": r.name,
                        "cache_size_mib": r.units.len(),
                        // A volume on the device that no cached bdev of
                        // this process serves (not loaded yet).
                        "attached": attached.iter().any(|v| v.params().name == r.name && v.cache_name() == *name),
                    })
                })
                .collect();
            json!({
                "cache_bdev_name": name,
                "uuid": uuid_string(&d.uuid()),
                "total_mib": d.total_units(),
                "free_mib": d.free_units(),
                "volumes": vols,
            })
        })
        .collect();
    Ok(Value::Array(list))
}

/// `bdev_adacache_delete` of a volume no cached bdev serves but whose cache
/// an opened device holds (never loaded: refused as damaged, or not
/// attached yet). Its data cannot be written back without loading it, so
/// only `force` (discard) removes it; without, the answer says so.
async fn delete_unattached(state: &State, name: &str, force: bool) -> Result<Value, RpcError> {
    let holder = state
        .caches
        .iter()
        .find(|(_, d)| d.find_volume(name).is_some());
    let Some((cache_bdev, device)) = holder else {
        // Not served and on no opened device: the usual answer.
        return volume(state, name).map(|_| json!(true));
    };
    if !force {
        return Err(RpcError::errno(
            libc_errno::EBUSY,
            format!("no cached bdev named {name}, but cache bdev {cache_bdev} holds its cache, not loaded (damaged, or not attached yet); load it (bdev_adacache_create with load) to write its dirty data back, or force=true to discard it"),
        ));
    }
    device.delete_volume(name).await.map_err(|e| {
        volume_error(
            &format!("discarding the unattached cache {name} on {cache_bdev}"),
            e.into(),
        )
    })?;
    tracing::warn!(volume = %name, cache = %cache_bdev, "unattached cache discarded (force)");
    Ok(json!(true))
}
