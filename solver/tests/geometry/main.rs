//! Geometries: legal layouts per GPU family, properties of the search over every model, and
//! specs as users type them.

mod families;
mod properties;
mod spec;
