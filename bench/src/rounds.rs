//! Paired, order-swapped rounds: every arm runs once per round, in the
//! given order in even rounds and in the reverse order in odd ones. Drift on
//! a shared machine (another job starting, a page cache warming, thermal
//! limits) then lands on every arm alike instead of on whichever runs first
//! or last: over an even number of rounds every arm's mean position in the
//! round is the same.

/// The arms (indices `0..arms`) of round `round`, in the order they run.
pub fn round_order(arms: usize, round: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..arms).collect();
    if round % 2 == 1 {
        order.reverse();
    }
    order
}

/// Every round's order, for `rounds` rounds.
pub fn schedule(arms: usize, rounds: usize) -> Vec<Vec<usize>> {
    (0..rounds).map(|r| round_order(arms, r)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_round_runs_every_arm_once_and_rounds_alternate() {
        let s = schedule(5, 4);
        assert_eq!(s.len(), 4);
        for (r, order) in s.iter().enumerate() {
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..5).collect::<Vec<_>>(), "round {r}");
        }
        assert_eq!(s[0], vec![0, 1, 2, 3, 4]);
        assert_eq!(s[1], vec![4, 3, 2, 1, 0]);
        assert_eq!(s[2], s[0]);
        assert_eq!(s[3], s[1]);
    }

    #[test]
    fn over_even_rounds_every_arm_has_the_same_mean_position() {
        for arms in 1..7 {
            for rounds in [2, 4, 6] {
                let s = schedule(arms, rounds);
                let mean_position = |arm: usize| {
                    s.iter()
                        .map(|o| o.iter().position(|&a| a == arm).unwrap_or(usize::MAX))
                        .sum::<usize>() as f64
                        / rounds as f64
                };
                for arm in 0..arms {
                    assert_eq!(
                        mean_position(arm),
                        (arms as f64 - 1.0) / 2.0,
                        "arm {arm} of {arms}, {rounds} rounds"
                    );
                }
            }
        }
    }

    #[test]
    fn adjacent_arms_swap_who_goes_first() {
        // Each pair of arms meets in both orders, so neither always follows
        // the other (and inherits its leftovers: warm caches, busy cores).
        let s = schedule(3, 2);
        for (a, b) in [(0, 1), (1, 2), (0, 2)] {
            let first =
                |o: &Vec<usize>| o.iter().position(|&x| x == a) < o.iter().position(|&x| x == b);
            assert_ne!(first(&s[0]), first(&s[1]), "arms {a} and {b}");
        }
    }

    #[test]
    fn zero_arms_or_rounds() {
        assert!(schedule(3, 0).is_empty());
        assert_eq!(schedule(0, 2), vec![Vec::<usize>::new(), Vec::new()]);
    }
}
