//! Generation: a valid image to a constant `::amx_runtime::TileConfig`, or the errors next to a
//! stand-in value.

use proc_macro2::{Literal, TokenStream};
use quote::quote;

/// The configuration as a constant expression: the 64 bytes, byte for byte, wrapped in the
/// aligned type. Usable in `static` and `const` items.
pub fn config(image: &[u8; amx_tilecfg::image::SIZE]) -> TokenStream {
    let bytes = image.iter().map(|&b| Literal::u8_suffixed(b));
    // SAFETY (of the emitted block): the image passed every rule of `amx_tilecfg::validate`
    // before this function was called, which is the constructor's precondition.
    quote! {
        unsafe { ::amx_runtime::TileConfig::__from_validated_bytes([#(#bytes),*]) }
    }
}

/// The errors, followed by the INIT configuration so that the expression still has the type the
/// user expects and the errors are the only ones they see (no "mismatched types" cascade).
pub fn fallback(errors: &syn::Error) -> TokenStream {
    let errors = errors.to_compile_error();
    quote! {
        {
            #errors
            ::amx_runtime::TileConfig::INIT
        }
    }
}

/// The INIT configuration, for the item form's layout when the input has errors.
pub fn init() -> TokenStream {
    quote!(::amx_runtime::TileConfig::INIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_is_emitted_byte_for_byte() {
        let mut image = [0u8; amx_tilecfg::image::SIZE];
        image[0] = 1;
        image[63] = 0xAB;
        let text = config(&image).to_string();
        assert!(
            text.contains(":: amx_runtime :: TileConfig :: __from_validated_bytes"),
            "{text}"
        );
        assert_eq!(text.matches("u8").count(), 64, "{text}");
        assert!(text.contains("[1u8 , 0u8 ,"), "{text}");
        assert!(text.contains(", 171u8]"), "{text}");
    }

    #[test]
    fn errors_come_with_the_init_configuration() {
        let error = syn::Error::new(proc_macro2::Span::call_site(), "a mistake");
        let text = fallback(&error).to_string();
        assert!(text.contains("compile_error ! { \"a mistake\" }"), "{text}");
        assert!(
            text.ends_with(":: amx_runtime :: TileConfig :: INIT }"),
            "{text}"
        );
    }
}
