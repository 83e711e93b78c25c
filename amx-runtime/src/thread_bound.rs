//! The marker that keeps a guard over tile state on its thread.
//!
//! The OS keeps a tile configuration and the tiles' contents per thread (XSAVE state, switched
//! with the thread), and this crate tracks the loaded configuration per thread too. A guard that
//! moved to another thread would run its instructions against that thread's state, which its
//! checks never saw. So the guards ([`Tiles`](crate::Tiles), [`Hardware`](crate::Hardware),
//! [`SignalScope`](crate::SignalScope)) hold a [`ThreadBound`], which makes them neither `Send`
//! nor `Sync`. The pointee's name is what the compiler's error shows when one is moved into
//! `thread::spawn`: "`*const ...::TileStateOfTheConfiguringThread` cannot be sent between
//! threads safely".

use std::marker::PhantomData;

/// Never constructed: it only names, in the compiler's error, why the guard cannot move.
pub(crate) enum TileStateOfTheConfiguringThread {}

/// Neither `Send` nor `Sync`, and zero-sized.
pub(crate) type ThreadBound = PhantomData<*const TileStateOfTheConfiguringThread>;
