//! Independent items read on every core, in order: reading a large cluster's objects is most of
//! `geometer plan --snapshot` and of a controller's planning round.

/// `f` of consecutive chunks of `items` (at least `per_thread` items each, one chunk a core),
/// in order.
pub(crate) fn in_order<T: Sync, R: Send>(
    items: &[T],
    per_thread: usize,
    f: impl Fn(&[T]) -> R + Sync,
) -> Vec<R> {
    let threads = threads_for(items.len(), per_thread);
    if threads <= 1 {
        return vec![f(items)];
    }
    each_chunk(items.chunks(items.len().div_ceil(threads)).collect(), f)
}

/// `f` of each owned item, on `threads` threads, in order: the items split into consecutive
/// chunks, one a thread, of about equal total `weight` (a List's items differ in size: a
/// MigNode's text is ten times a Pod's, and the kinds come in runs).
pub(crate) fn in_order_owned<T: Send, R: Send>(
    items: Vec<T>,
    threads: usize,
    weight: impl Fn(&T) -> usize,
    f: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    let per_chunk = |chunk: Vec<T>| chunk.into_iter().map(&f).collect::<Vec<_>>();
    if threads <= 1 {
        return per_chunk(items);
    }
    let ends = chunk_ends(&items.iter().map(weight).collect::<Vec<_>>(), threads);
    let mut items = items.into_iter();
    let mut start = 0;
    let chunks: Vec<Vec<T>> = ends
        .into_iter()
        .map(|end| {
            let chunk = items.by_ref().take(end - start).collect();
            start = end;
            chunk
        })
        .collect();
    each_chunk(chunks, per_chunk).into_iter().flatten().collect()
}

/// Where each of `chunks` consecutive chunks of items with these weights ends (exclusive), so
/// that each holds about an equal share of the total (a chunk may be empty).
fn chunk_ends(weights: &[usize], chunks: usize) -> Vec<usize> {
    let total: usize = weights.iter().sum();
    let mut ends = Vec::with_capacity(chunks);
    let (mut end, mut sum) = (0, 0);
    for chunk in 1..=chunks {
        // Items go in while the chunk's running total stays under its share of the whole.
        let share = total * chunk / chunks;
        while end < weights.len() && (chunk == chunks || sum + weights[end] / 2 < share) {
            sum += weights[end];
            end += 1;
        }
        ends.push(end);
    }
    ends
}

/// `f` of every chunk, one thread each, in order. The calling thread does the first chunk:
/// memory freed into a thread's allocator arena is reused by that thread only, and the rest of
/// planning runs on this one.
fn each_chunk<C: Send, R: Send>(chunks: Vec<C>, f: impl Fn(C) -> R + Sync) -> Vec<R> {
    let mut chunks = chunks.into_iter();
    let Some(own) = chunks.next() else { return Vec::new() };
    std::thread::scope(|scope| {
        let f = &f;
        let handles: Vec<_> = chunks.map(|chunk| scope.spawn(move || f(chunk))).collect();
        let mut out = vec![f(own)];
        for handle in handles {
            // `f` does not panic on any input; if it did, the panic goes on here.
            out.push(handle.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        out
    })
}

/// As many threads as there are cores, with at least `per_thread` items each; one for a few.
pub(crate) fn threads_for(items: usize, per_thread: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    cores.min(items / per_thread.max(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_come_back_in_order_and_cover_every_item() {
        let items: Vec<u32> = (0..100_000).collect();
        let parts = in_order(&items, 1_000, |chunk| chunk.to_vec());
        assert_eq!(parts.concat(), items);
        assert_eq!(in_order(&items[..10], 1_000, <[u32]>::len), vec![10], "a few items: one chunk");
    }

    #[test]
    fn owned_items_come_back_in_order_whatever_the_threads() {
        for threads in [1, 2, 3, 8, 200] {
            let items: Vec<String> = (0..100).map(|i| i.to_string()).collect();
            let out = in_order_owned(items, threads, String::len, |s| s.parse::<u32>().unwrap());
            assert_eq!(out, (0..100).collect::<Vec<u32>>(), "{threads} threads");
        }
        assert!(in_order_owned(Vec::<u32>::new(), 4, |_| 1, |x| x).is_empty());
    }

    #[test]
    fn chunks_share_the_weight_not_the_count() {
        // A run of small items, then a run of items ten times larger (Pods, then MigNodes).
        let weights: Vec<usize> = [vec![1; 800], vec![10; 200]].concat();
        assert_eq!(chunk_ends(&weights, 2), vec![860, 1_000], "1,400 of 2,800 in the first chunk");
        assert_eq!(chunk_ends(&weights, 1), vec![1_000]);
        assert_eq!(chunk_ends(&[5, 5, 5, 5], 3), vec![1, 3, 4]);
        assert_eq!(chunk_ends(&[], 2), vec![0, 0]);
    }
}
