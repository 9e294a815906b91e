//! The server-level allocator of units: which free units a new or growing
//! volume gets. The volume table records a volume's units as extents and
//! must fit one superblock copy, so the allocator keeps volumes in few
//! extents: it extends a volume in place when it can, then prefers the
//! smallest free run that holds the whole request, then the largest runs.

/// Picks `n` free units (`used[u]` false) for a volume whose last unit is
/// `last`, in the order they should be appended; `None` if fewer are free.
pub(crate) fn allocate(used: &[bool], n: u32, last: Option<u32>) -> Option<Vec<u32>> {
    let free = used.iter().filter(|u| !**u).count();
    if free < n as usize {
        return None;
    }
    let mut used = used.to_vec();
    let mut out = Vec::with_capacity(n as usize);
    // Grow in place: the units right after the volume's last one.
    if let Some(last) = last {
        let mut u = last as usize + 1;
        while out.len() < n as usize && u < used.len() && !used[u] {
            used[u] = true;
            out.push(u as u32);
            u += 1;
        }
    }
    while out.len() < n as usize {
        let want = n as usize - out.len();
        let runs = free_runs(&used);
        let (start, len) = runs
            .iter()
            .filter(|r| r.1 >= want)
            .min_by_key(|r| r.1)
            .or_else(|| runs.iter().max_by_key(|r| r.1))
            .copied()
            .expect("enough free units were counted");
        let take = start..start + len.min(want);
        used[take.clone()].fill(true);
        out.extend(take.map(|u| u as u32));
    }
    Some(out)
}

/// Free runs `(start, len)` in ascending order.
fn free_runs(used: &[bool]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut u = 0;
    while u < used.len() {
        if used[u] {
            u += 1;
            continue;
        }
        let start = u;
        while u < used.len() && !used[u] {
            u += 1;
        }
        runs.push((start, u - start));
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn used(s: &str) -> Vec<bool> {
        s.chars().map(|c| c == 'x').collect()
    }

    #[test]
    fn grows_in_place_then_best_fit_then_largest() {
        // Units 2..4 free after the volume's last unit 1.
        assert_eq!(allocate(&used("xx..x..."), 2, Some(1)), Some(vec![2, 3]));
        // In place only partly: the rest from the smallest run that holds it.
        assert_eq!(
            allocate(&used("xx.x..x..."), 3, Some(1)),
            Some(vec![2, 4, 5])
        );
        // No run holds 4: largest runs first.
        assert_eq!(
            allocate(&used(".x..x...x"), 4, None),
            Some(vec![5, 6, 7, 0])
        );
        assert_eq!(allocate(&used("x.x"), 2, None), None);
        assert_eq!(allocate(&used("..."), 0, None), Some(vec![]));
    }
}
