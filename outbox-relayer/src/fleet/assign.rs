//! Which process of a fleet relays which database: rendezvous hashing with bounded loads. Every
//! process computes the same answer from the same list and the same members, with no
//! coordination beyond knowing who the members are; each member gets `ceil(databases / members)`
//! at most, and a member that joins or leaves moves few databases of the others.

use std::collections::BTreeMap;

/// The owner of each database among `members` (member ids; none: no owner), by name.
pub(super) fn assign<'a>(databases: impl IntoIterator<Item = &'a str>, members: &[u32]) -> BTreeMap<&'a str, u32> {
    let mut names: Vec<&str> = databases.into_iter().collect();
    names.sort_unstable();
    names.dedup();
    let mut owners = BTreeMap::new();
    if members.is_empty() {
        return owners;
    }
    let cap = names.len().div_ceil(members.len());
    let mut load: BTreeMap<u32, usize> = members.iter().map(|&m| (m, 0)).collect();
    for name in names {
        let mut ranked: Vec<u32> = load.keys().copied().collect();
        ranked.sort_unstable_by_key(|&m| std::cmp::Reverse((score(m, name), m)));
        if let Some(&owner) = ranked.iter().find(|m| load[*m] < cap) {
            *load.entry(owner).or_default() += 1;
            owners.insert(name, owner);
        }
    }
    owners
}

/// How much `member` wants `database`: FNV-1a over both, finished by splitmix64's mixer so that
/// near names spread.
fn score(member: u32, database: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in member.to_le_bytes().iter().chain(database.as_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("tenant-{i}")).collect()
    }

    fn loads(owners: &BTreeMap<&str, u32>) -> BTreeMap<u32, usize> {
        let mut l = BTreeMap::new();
        for m in owners.values() {
            *l.entry(*m).or_default() += 1;
        }
        l
    }

    #[test]
    fn every_database_has_one_owner_and_no_member_more_than_its_share() {
        for members in [vec![7], vec![7, 9], vec![1, 2, 3], vec![5, 11, 400_000, 3_000_000_000]] {
            for n in [1, 2, 10, 50, 101] {
                let list = names(n);
                let owners = assign(list.iter().map(String::as_str), &members);
                assert_eq!(owners.len(), n, "{members:?} {n}");
                let l = loads(&owners);
                let cap = n.div_ceil(members.len());
                assert!(l.values().all(|&k| k <= cap), "{members:?} {n}: {l:?}");
                if n >= members.len() * cap {
                    assert!(l.values().all(|&k| k == cap) && l.len() == members.len(), "{members:?} {n}: {l:?}");
                }
            }
        }
    }

    #[test]
    fn the_answer_depends_on_the_list_and_the_members_not_their_order() {
        let list = names(50);
        let a = assign(list.iter().map(String::as_str), &[3, 1, 2]);
        let b = assign(list.iter().rev().map(String::as_str), &[2, 3, 1]);
        assert_eq!(a, b);
        assert!(assign(list.iter().map(String::as_str), &[]).is_empty());
    }

    #[test]
    fn a_member_that_joins_takes_its_share_mostly_from_the_others_and_few_move_between_them() {
        let list = names(50);
        let before = assign(list.iter().map(String::as_str), &[10, 20]);
        let after = assign(list.iter().map(String::as_str), &[10, 20, 30]);
        let to_new = after.values().filter(|&&m| m == 30).count();
        let between_old =
            list.iter().filter(|n| after[n.as_str()] != 30 && after[n.as_str()] != before[n.as_str()]).count();
        assert!((16..=17).contains(&to_new), "the new member's share: {to_new}");
        assert!(between_old <= 8, "{between_old} databases moved between the members already there");
        // And back: when it leaves, its databases go to the others.
        let again = assign(list.iter().map(String::as_str), &[10, 20]);
        assert_eq!(again, before);
    }
}
