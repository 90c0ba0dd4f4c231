//! Which layers share a page, and how long each keeps its positions (sliding windows).
//!
//! The pool is made of pages: one page holds `block_size` positions of K and V for
//! `layers_per_page` layers. Layers attending over the same span (all positions, or the same
//! sliding window) are split into groups of `layers_per_page`; a sequence's block table keeps
//! one list of pages per group. A group of full-attention layers keeps every block; a group of
//! local (windowed) layers releases a block once every position in it is older than the window
//! of the next query, so a long sequence holds a window's worth of pages on its local layers.
//!
//! `layers_per_page` is the greatest common divisor of the layer counts of each span (3 for
//! gemma-3-270m: 3 global and 15 local layers, so 1 full group and 5 windowed groups). Without
//! windows there is one group of every layer: a page is a block of the whole model, as before.

/// Layers a model can have (bounds [`LayerWindows`]).
const MAX_LAYERS: usize = 1024;

/// Per layer, whether it is local, and the window of the local ones: a compact, `Copy`
/// description carried by [`super::KvCacheConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerWindows {
    /// Positions a local layer's query sees, itself included (0 = no local layers).
    pub size: usize,
    /// Bit `l` set when layer `l` is local.
    local: [u64; MAX_LAYERS / 64],
}

impl LayerWindows {
    /// Every layer attends to every position.
    pub const NONE: LayerWindows = LayerWindows {
        size: 0,
        local: [0; MAX_LAYERS / 64],
    };

    /// Layers `l` with `local[l]` see the last `size` positions; `None` when no layer is local
    /// or `size` is 0.
    pub fn new(size: usize, local: &[bool]) -> Option<LayerWindows> {
        if size == 0 || local.len() > MAX_LAYERS || !local.contains(&true) {
            return None;
        }
        let mut w = LayerWindows {
            size,
            local: [0; MAX_LAYERS / 64],
        };
        for (l, _) in local.iter().enumerate().filter(|(_, &x)| x) {
            w.local[l / 64] |= 1 << (l % 64);
        }
        Some(w)
    }

    /// Whether layer `l` is local.
    pub fn is_local(&self, l: usize) -> bool {
        l < MAX_LAYERS && self.local[l / 64] >> (l % 64) & 1 == 1
    }
}

impl Default for LayerWindows {
    fn default() -> Self {
        LayerWindows::NONE
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The page layout of a cache (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvLayout {
    per_page: usize,
    /// Per layer: its group and its slot in the group's pages.
    place: Vec<(usize, usize)>,
    /// Per group: its window (`None` = every position).
    windows: Vec<Option<usize>>,
}

impl KvLayout {
    /// The layout of `n_layer` layers with `windows` (full-attention groups first).
    pub fn new(n_layer: usize, windows: &LayerWindows) -> KvLayout {
        let locals: Vec<usize> = (0..n_layer).filter(|&l| windows.is_local(l)).collect();
        let fulls: Vec<usize> = (0..n_layer).filter(|&l| !windows.is_local(l)).collect();
        let per_page = gcd(fulls.len(), locals.len()).max(1);
        let mut place = vec![(0, 0); n_layer];
        let mut groups = Vec::new();
        for (layers, window) in [(&fulls, None), (&locals, Some(windows.size))] {
            for chunk in layers.chunks(per_page) {
                for (slot, &l) in chunk.iter().enumerate() {
                    place[l] = (groups.len(), slot);
                }
                groups.push(window);
            }
        }
        KvLayout {
            per_page,
            place,
            windows: groups,
        }
    }

    /// Layers whose K/V one page holds.
    pub fn layers_per_page(&self) -> usize {
        self.per_page
    }

    /// Groups of layers (each with its own list of pages per sequence).
    pub fn n_groups(&self) -> usize {
        self.windows.len()
    }

    /// The group and the slot within its pages of layer `l`.
    pub fn place(&self, l: usize) -> (usize, usize) {
        self.place[l]
    }

    /// The window of group `g` (`None` = every position).
    pub fn window(&self, g: usize) -> Option<usize> {
        self.windows[g]
    }

    /// Whether any group has a window.
    pub fn has_windows(&self) -> bool {
        self.windows.iter().any(Option::is_some)
    }

    /// The first logical block group `g` must still hold when the earliest query to come is
    /// at position `pos`: the block of `pos + 1 - window` (0 for a full group).
    pub fn first_kept_block(&self, g: usize, pos: usize, block_size: usize) -> usize {
        match self.windows[g] {
            Some(w) => (pos + 1).saturating_sub(w.max(1)) / block_size.max(1),
            None => 0,
        }
    }

    /// Pages a sequence of `positions` positions holds at most, computed in steps of at most
    /// `chunk` positions: every block in full groups, at most the blocks spanning a window plus
    /// a chunk in windowed ones.
    pub fn pages_for(&self, positions: usize, chunk: usize, block_size: usize) -> usize {
        let bs = block_size.max(1);
        let all = positions.div_ceil(bs);
        self.windows
            .iter()
            .map(|w| match w {
                None => all,
                Some(w) => all.min((w + chunk.max(1)).div_ceil(bs) + 1),
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemma_270m_groups_three_layers_a_page() {
        let local: Vec<bool> = (0..18).map(|l| l % 6 < 5).collect();
        let w = LayerWindows::new(512, &local).unwrap();
        let k = KvLayout::new(18, &w);
        assert_eq!((k.layers_per_page(), k.n_groups()), (3, 6));
        assert_eq!(k.window(0), None);
        assert!((1..6).all(|g| k.window(g) == Some(512)));
        // Global layers 5, 11, 17 share group 0.
        assert_eq!(
            [k.place(5), k.place(11), k.place(17)],
            [(0, 0), (0, 1), (0, 2)]
        );
        assert_eq!(k.place(0), (1, 0));
        // 8192 positions in blocks of 16: 512 pages of the global group, and each local group
        // holds (512 + 512) / 16 + 1 = 65 with 512-token chunks.
        assert_eq!(k.pages_for(8192, 512, 16), 512 + 5 * 65);
        assert_eq!(k.first_kept_block(1, 1000, 16), (1001 - 512) / 16);
        assert_eq!(k.first_kept_block(0, 1000, 16), 0);
    }

    #[test]
    fn no_window_is_one_group_of_every_layer() {
        let k = KvLayout::new(30, &LayerWindows::NONE);
        assert_eq!(
            (k.layers_per_page(), k.n_groups(), k.place(29)),
            (30, 1, (0, 29))
        );
        assert!(!k.has_windows());
        assert_eq!(k.pages_for(100, 512, 16), 7);
        assert!(LayerWindows::new(0, &[true]).is_none());
        assert!(LayerWindows::new(8, &[false, false]).is_none());
    }

    #[test]
    fn every_layer_local() {
        let w = LayerWindows::new(64, &[true; 4]).unwrap();
        let k = KvLayout::new(4, &w);
        assert_eq!((k.layers_per_page(), k.n_groups()), (4, 1));
        assert_eq!(k.window(0), Some(64));
    }
}
