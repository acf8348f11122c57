//! Which GPU reconfigurations were made for nothing: their new slices were taken only by
//! members of gangs that had not started, and never by a pod that ran.
//!
//! Each time a node becomes ready, every GPU its plan changed is one reconfiguration (as
//! counted in `gpus_reconfigured`), and the slices it created are followed until a later
//! reconfiguration destroys them or the run ends. A reconfiguration counts as *for nothing*
//! when some slice it created was held by a gang member waiting for its gang (see
//! `super::gangs`) and none was ever held by a running pod. Slices nobody took (a forecast no pod
//! used) do not make a reconfiguration count: that waste is not the gangs'.

use std::collections::BTreeMap;

use crate::strategy::Slot;

#[derive(Debug, Clone, Default)]
struct Change {
    /// Its slices not destroyed yet.
    live: usize,
    taken_by_waiting_member: bool,
    taken_by_running_pod: bool,
}

#[derive(Debug, Clone, Default)]
pub(super) struct ChangeLedger {
    changes: Vec<Change>,
    /// The reconfiguration that created each live slice, by GPU and slot.
    origin: BTreeMap<(usize, Slot), usize>,
    for_nothing: u64,
}

impl ChangeLedger {
    /// GPU `gpu` goes from `old` to `target`.
    pub(super) fn reconfigured(&mut self, gpu: usize, old: &[Slot], target: &[Slot]) {
        for slot in old.iter().filter(|s| !target.contains(s)) {
            let Some(c) = self.origin.remove(&(gpu, *slot)) else { continue };
            self.changes[c].live -= 1;
            if self.changes[c].live == 0 {
                self.close(c);
            }
        }
        let created: Vec<Slot> = target.iter().filter(|s| !old.contains(s)).copied().collect();
        if created.is_empty() {
            return;
        }
        let c = self.changes.len();
        self.changes.push(Change { live: created.len(), ..Change::default() });
        for slot in created {
            self.origin.insert((gpu, slot), c);
        }
    }

    /// A pod holds these slices: running, or (`running` false) waiting for its gang.
    pub(super) fn taken(&mut self, held: &[(usize, Slot)], running: bool) {
        for key in held {
            let Some(&c) = self.origin.get(key) else { continue };
            let change = &mut self.changes[c];
            if running {
                change.taken_by_running_pod = true;
            } else {
                change.taken_by_waiting_member = true;
            }
        }
    }

    fn close(&mut self, c: usize) {
        let change = &self.changes[c];
        if change.taken_by_waiting_member && !change.taken_by_running_pod {
            self.for_nothing += 1;
        }
    }

    /// Closes the reconfigurations whose slices are still there (the run ends) and returns how
    /// many were for nothing.
    pub(super) fn close_all(&mut self) -> u64 {
        let open: Vec<usize> = (0..self.changes.len()).filter(|&c| self.changes[c].live > 0).collect();
        for c in open {
            self.changes[c].live = 0;
            self.close(c);
        }
        self.for_nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_slices_taken_by_waiting_members_and_never_run_on_count() {
        let s = |profile, start| Slot { profile, start };
        let mut ledger = ChangeLedger::default();
        // GPU 0: a waiting member took a new slice, nobody ran there: for nothing.
        ledger.reconfigured(0, &[], &[s(1, 0), s(1, 1)]);
        ledger.taken(&[(0, s(1, 0))], false);
        // GPU 1: a waiting member, then a running pod on another new slice: it served.
        ledger.reconfigured(1, &[s(2, 0)], &[s(2, 0), s(1, 4)]);
        ledger.taken(&[(1, s(1, 4))], false);
        ledger.taken(&[(1, s(1, 4))], true);
        // GPU 2: a waiting member held a slice the reconfiguration kept, not one it made.
        ledger.reconfigured(2, &[s(1, 0)], &[s(1, 0), s(1, 1)]);
        ledger.taken(&[(2, s(1, 0))], false);
        // GPU 3: a slice a waiting member held survives the next reconfiguration and is run
        // on after it: the first reconfiguration served too.
        ledger.reconfigured(3, &[], &[s(1, 0), s(1, 1)]);
        ledger.taken(&[(3, s(1, 1))], false);
        ledger.reconfigured(3, &[s(1, 0), s(1, 1)], &[s(2, 2), s(1, 1)]);
        ledger.taken(&[(3, s(1, 1))], true);
        assert_eq!(ledger.close_all(), 1);
        assert_eq!(ledger.close_all(), 1, "closing twice counts nothing more");
    }

    #[test]
    fn a_reconfiguration_is_judged_when_its_last_slice_goes() {
        let s = |profile, start| Slot { profile, start };
        let mut ledger = ChangeLedger::default();
        ledger.reconfigured(0, &[], &[s(1, 0)]);
        ledger.taken(&[(0, s(1, 0))], false);
        ledger.reconfigured(0, &[s(1, 0)], &[s(3, 0)]);
        assert_eq!(ledger.for_nothing, 1);
        // The new slice nobody took: not the gangs' waste.
        assert_eq!(ledger.close_all(), 1);
    }
}
